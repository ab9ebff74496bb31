import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import pg from 'pg';
import type { PostgresPoolClient } from './connection/types.js';
import { sqlState } from './errors.js';
import { quoteIdentifier } from './schema/names.js';

/** How long the start-up probe waits for its own NOTIFY, once sent, before trying again later. */
const PROBE_TIMEOUT = 2000;
/** After a failed attempt, a silent probe or a lost connection, wait this long before the next, doubling up to {@link MAX_RETRY_DELAY}. */
const FIRST_RETRY_DELAY = 250;
const MAX_RETRY_DELAY = 10_000;
/** Keys announced while nobody here waited their turn, remembered per channel (see {@link Channel}). */
const MAX_PENDING = 256;
const FEATURE_NOT_SUPPORTED = '0A000';

/**
 * - `idle`: no connection, none wanted yet (no store waited or called `ready()`);
 * - `connecting`, `live`: opening it, and open with every channel LISTENed;
 * - `retrying`: an attempt failed, its probe heard nothing, or the connection was lost; the
 *   next attempt is scheduled;
 * - `unsupported`: LISTEN cannot work here (a pooler in between, PGlite's shared session, a
 *   server that refuses LISTEN);
 * - `closed`: the pool's last store closed, or the owner of the pool ended it.
 */
type ListenerState = 'idle' | 'connecting' | 'live' | 'retrying' | 'unsupported' | 'closed';

/**
 * The one LISTEN connection of a pool, shared by every store on it that waits for wake-ups
 * (lock providers, process backends), each on a channel of its own. It is a `pg.Client` that
 * stowage owns for the whole session, opened like the pool's connections. While it sits open
 * and idle it never keeps the process alive (its socket is unref'd); while a call awaits
 * something on it (opening, the probe, UNLISTEN, closing) it does, so that the process cannot
 * exit in the middle of `ready()` or `close()`.
 *
 * LISTEN only ever runs on a connection known to be the server's own session, decided before
 * the first LISTEN and leaving nothing behind:
 * - a pooler (PgBouncer, …) hands its clients backend keys of its own: when the process id the
 *   connection was given at start-up is not `pg_backend_pid()`, a pooler is in between, and a
 *   LISTEN there would stay on a pooled server session and leak NOTIFYs to other clients. No
 *   LISTEN is sent; waits poll.
 * - otherwise a probe, once: LISTEN on a channel of its own, NOTIFY through the pool, UNLISTEN.
 *   If the NOTIFY reaches the sender instead (PGlite's socket server puts every client on one
 *   session), LISTEN does not work here either. If it reaches nobody within two seconds of
 *   being sent, nothing is decided (a slow or busy server): the probe is tried again later,
 *   as after any failed attempt. Only definite evidence (a pooler's process id, a misrouted
 *   NOTIFY, LISTEN refused with 0A000) switches wake-ups off for good.
 *
 * A connection that fails or is lost is opened again, with a growing delay; `live` is true only
 * while it is open and listening. After it comes back, every wait is woken once (a release may
 * have been announced in between).
 */
export class Listener {
  /** A client of the pool (for the probe's NOTIFY), taken as the pool's statements take theirs. */
  readonly #checkout: () => Promise<PostgresPoolClient>;
  /** Settings of the LISTEN connection: the pool's own, or those of `listenUrl`. */
  readonly #config: object | undefined;
  readonly #channels = new Map<string, Channel>();
  #state: ListenerState = 'idle';
  #client: pg.Client | undefined;
  /** The channels LISTENed on {@link #client}. */
  #listening = new Set<string>();
  #attempt: Promise<void> | undefined;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  #retryDelay = FIRST_RETRY_DELAY;
  /** Bumped whenever the connection is given up, so an attempt in flight knows to stop. */
  #generation = 0;
  #probed = false;
  #everLive = false;
  /** Statements and `end()` awaited on a LISTEN connection right now (see {@link #awaiting}). */
  #awaited = 0;
  #probe: { channel: string; token: string; resolve: (outcome: ProbeOutcome) => void } | undefined;

  constructor(checkout: () => Promise<PostgresPoolClient>, config: object | undefined) {
    this.#checkout = checkout;
    this.#config = config;
  }

  /** True while the connection is open and listening. */
  get live(): boolean {
    return this.#state === 'live';
  }

  subscribe(channel: string): ReleaseWakeups {
    let waiters = this.#channels.get(channel);
    if (!waiters) {
      this.#channels.set(channel, (waiters = new Channel()));
      if (this.#state === 'live') this.#listen(this.#client!, [channel]);
    }
    waiters.subscribers++;
    return new ReleaseWakeups(this, channel, waiters);
  }

  /** A store's subscription ends; the connection closes with the last one (a later one opens it again). */
  async unsubscribe(channel: string): Promise<void> {
    const waiters = this.#channels.get(channel);
    if (!waiters || --waiters.subscribers > 0) return;
    this.#channels.delete(channel);
    if (this.#channels.size === 0) {
      if (this.#state !== 'unsupported' && this.#state !== 'closed') await this.#giveUp('idle');
    } else if (this.#state === 'live' && this.#listening.delete(channel)) {
      const client = this.#client!;
      await this.#awaiting(client, () => client.query(`UNLISTEN ${quoteIdentifier(channel)}`)).catch(() => undefined);
    }
  }

  /** Opens the connection if none is open or being opened; resolves when that first attempt is over. */
  start(): Promise<void> {
    if (this.#channels.size > 0 && this.#state === 'idle') this.#attempt = this.#connect();
    return this.#state === 'connecting' ? this.#attempt! : Promise.resolve();
  }

  /** For good: the pool's last store closed, or its owner ended it. */
  close(): Promise<void> {
    return this.#giveUp('closed');
  }

  async #giveUp(state: ListenerState): Promise<void> {
    this.#generation++;
    this.#state = state;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#probe?.resolve('timeout');
    const client = this.#client;
    this.#client = undefined;
    this.#listening = new Set();
    if (client) await this.#awaiting(client, () => client.end()).catch(() => undefined);
  }

  /**
   * Runs `work` on `client` with its socket ref'd: Node must not exit while a call awaits it.
   * Once nothing is awaited, the live connection's socket is unref'd again (an idle LISTEN
   * connection never keeps the process alive). A connection being opened stays ref'd until it
   * is live.
   */
  async #awaiting<T>(client: pg.Client, work: () => Promise<T>): Promise<T> {
    this.#awaited++;
    setRef(client, true);
    try {
      return await work();
    } finally {
      if (--this.#awaited === 0 && this.#state === 'live') setRef(this.#client!, false);
    }
  }

  async #connect(): Promise<void> {
    const generation = this.#generation;
    const given = () => generation !== this.#generation;
    this.#state = 'connecting';
    const config = this.#config;
    if (!config || typeof config !== 'object') return void (this.#state = 'unsupported');
    // The settings object itself (pg.Pool keeps the password non-enumerable: never a copy).
    const client = new pg.Client(config as pg.ClientConfig);
    client.on('error', () => this.#lost(client));
    client.on('end', () => this.#lost(client));
    client.on('notification', (message) => this.#notified(message.channel, message.payload ?? ''));
    try {
      // Ref'd (as every new socket) until it is live: ready() awaits all of this.
      await client.connect();
      if (given()) return void (await client.end().catch(() => undefined));
      const { rows } = await client.query('SELECT pg_backend_pid() AS pid');
      if (Number(rows[0].pid) !== (client as unknown as { processID: number }).processID) {
        // A pooler in between: never LISTEN through it (see the class comment).
        await client.end().catch(() => undefined);
        if (!given()) this.#state = 'unsupported';
        return;
      }
      if (!this.#probed) {
        const outcome = await this.#sendProbe(client);
        if (outcome !== 'works' || given()) {
          await client.end().catch(() => undefined);
          if (given()) return;
          // Reaching the sender is definite (a shared session); silence may be a slow server.
          if (outcome === 'misrouted') this.#state = 'unsupported';
          else this.#retryLater();
          return;
        }
        this.#probed = true;
      }
      const channels = [...this.#channels.keys()];
      if (channels.length > 0) await client.query(channels.map((channel) => `LISTEN ${quoteIdentifier(channel)}`).join('; '));
      if (given()) return void (await client.end().catch(() => undefined));
      this.#client = client;
      this.#listening = new Set(channels);
      this.#state = 'live';
      this.#retryDelay = FIRST_RETRY_DELAY;
      // Open and idle: it no longer keeps the process alive (unless a call awaits it).
      if (this.#awaited === 0) setRef(client, false);
      // Channels subscribed while the LISTEN was on its way.
      const late = [...this.#channels.keys()].filter((channel) => !this.#listening.has(channel));
      if (late.length > 0) this.#listen(client, late);
      // Releases announced while the connection was down were missed: let every wait look again.
      if (this.#everLive) for (const waiters of this.#channels.values()) waiters.nudge();
      this.#everLive = true;
    } catch (error) {
      // Not awaited: the end of a client whose connect() threw at once (a port out of range in
      // a pool of yours) never comes.
      void client.end().catch(() => undefined);
      if (given()) return;
      if (sqlState(error) === FEATURE_NOT_SUPPORTED) this.#state = 'unsupported';
      else this.#retryLater();
    }
  }

  #listen(client: pg.Client, channels: string[]): void {
    for (const channel of channels) this.#listening.add(channel);
    const text = channels.map((channel) => `LISTEN ${quoteIdentifier(channel)}`).join('; ');
    // A failure here means the connection failed: 'error'/'end' take it from there.
    client.query(text).catch(() => this.#lost(client));
  }

  #retryLater(): void {
    if (this.#channels.size === 0) {
      this.#state = 'idle';
      return;
    }
    this.#state = 'retrying';
    const generation = this.#generation;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (generation === this.#generation && this.#state === 'retrying') this.#attempt = this.#connect();
    }, this.#retryDelay);
    this.#retryTimer.unref();
    this.#retryDelay = Math.min(this.#retryDelay * 2, MAX_RETRY_DELAY);
  }

  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#listening = new Set();
    void client.end().catch(() => undefined);
    this.#retryLater();
  }

  #notified(channel: string, payload: string): void {
    const probe = this.#probe;
    if (probe?.channel === channel) {
      if (probe.token === payload) probe.resolve('works');
      return;
    }
    this.#channels.get(channel)?.notify(payload);
  }

  /**
   * LISTEN on a channel of the probe's own, NOTIFY through the pool, see who receives it,
   * UNLISTEN. The wait for the NOTIFY starts once it was sent: time spent waiting for a client
   * of a busy pool says nothing about LISTEN.
   */
  async #sendProbe(client: pg.Client): Promise<ProbeOutcome> {
    const channel = `stowage_probe_${randomUUID().replaceAll('-', '')}`;
    const token = randomUUID();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timeout = (): void => undefined;
    const outcome = new Promise<ProbeOutcome>((resolve) => {
      this.#probe = { channel, token, resolve };
      timeout = () => resolve('timeout');
    });
    const misrouted = (message: { channel?: string; payload?: string }) => {
      if (message.channel === channel) this.#probe?.resolve('misrouted');
    };
    // While it is checked out, an error of the sender's connection is the probe's (as in runOn).
    let failure: Error | undefined;
    const broken = (error: Error) => (failure ??= error);
    let sender: PostgresPoolClient | undefined;
    const notifications = () => sender as unknown as Partial<Pick<EventEmitter, 'on' | 'off'>>;
    try {
      await client.query(`LISTEN ${quoteIdentifier(channel)}`);
      sender = await this.#checkout();
      sender.on('error', broken);
      notifications().on?.('notification', misrouted);
      await sender.query({ text: 'SELECT pg_notify($1, $2)', values: [channel, token] });
      timer = setTimeout(timeout, PROBE_TIMEOUT);
      return await outcome;
    } finally {
      clearTimeout(timer);
      this.#probe = undefined;
      if (sender) {
        notifications().off?.('notification', misrouted);
        sender.removeListener('error', broken);
        sender.release(failure);
      }
      await client.query(`UNLISTEN ${quoteIdentifier(channel)}`).catch(() => undefined);
    }
  }
}

/** `pg.Client`'s `ref()` / `unref()` of its socket (not in @types/pg; absent from pg-native's client). */
function setRef(client: pg.Client, ref: boolean): void {
  const socket = client as unknown as { ref?(): void; unref?(): void };
  if (ref) socket.ref?.();
  else socket.unref?.();
}

/** What the probe NOTIFY did: reached the LISTEN connection, reached its sender, or nobody in time. */
type ProbeOutcome = 'works' | 'misrouted' | 'timeout';

/** One wait for a key: a lock waiting its turn (`fair`), or a feed that any announcement wakes. */
interface Waiter {
  /** When the wait began; turns go to the earliest. */
  readonly since: number;
  readonly fair: boolean;
  wake(): void;
}

/**
 * The waits on one channel, by key (the NOTIFY payload). An announcement wakes every feed
 * waiting on the key and one lock waiter, the one waiting longest: a release hands the lock to
 * one acquisition of this process rather than waking all of them to compete for it. A key
 * announced while no lock waiter was registered (it was between two attempts) is remembered,
 * so the next wait for it starts with another attempt at once.
 */
class Channel {
  subscribers = 0;
  readonly #waiters = new Map<string, Waiter[]>();
  readonly #pending = new Set<string>();

  /** Adds a wait in order of `since`; returns its removal. */
  add(key: string, waiter: Waiter): () => void {
    let list = this.#waiters.get(key);
    if (!list) this.#waiters.set(key, (list = []));
    let at = list.length;
    while (at > 0 && list[at - 1]!.since > waiter.since) at--;
    list.splice(at, 0, waiter);
    return () => this.#remove(key, waiter);
  }

  notify(key: string): void {
    const list = this.#waiters.get(key) ?? [];
    const turn = list.find((waiter) => waiter.fair);
    for (const waiter of list.filter((candidate) => !candidate.fair || candidate === turn)) {
      this.#remove(key, waiter);
      waiter.wake();
    }
    if (turn === undefined) {
      this.#pending.delete(key);
      this.#pending.add(key);
      if (this.#pending.size > MAX_PENDING) this.#pending.delete(this.#pending.values().next().value!);
    }
  }

  /** Whether `key` was announced while nobody waited its turn (and forgets it). */
  takePending(key: string): boolean {
    return this.#pending.delete(key);
  }

  /** After a reconnection: every feed, and the first lock waiter of every key, look again. */
  nudge(): void {
    for (const key of [...this.#waiters.keys()]) this.notify(key);
  }

  #remove(key: string, waiter: Waiter): void {
    const list = this.#waiters.get(key);
    const at = list?.indexOf(waiter) ?? -1;
    if (at === -1) return;
    list!.splice(at, 1);
    if (list!.length === 0) this.#waiters.delete(key);
  }
}

/**
 * A store's wake-ups on its channel (a lock table's releases, a process backend's state
 * entries), through the pool's one {@link Listener}.
 */
export class ReleaseWakeups {
  readonly #listener: Listener;
  readonly #channel: string;
  readonly #waiters: Channel;
  #closed = false;

  constructor(listener: Listener, channel: string, waiters: Channel) {
    this.#listener = listener;
    this.#channel = channel;
    this.#waiters = waiters;
  }

  /** True while the LISTEN connection is open and listening. */
  get supported(): boolean {
    return !this.#closed && this.#listener.live;
  }

  /** Opens the LISTEN connection if needed; resolves whether wake-ups work now. */
  async start(): Promise<boolean> {
    if (!this.#closed) await this.#listener.start();
    return this.supported;
  }

  /** Resolves on the next announcement of `key`; rejects with the reason when `signal` aborts. */
  wait(key: string, signal: AbortSignal): Promise<void> {
    return this.#wait(key, signal, false, performance.now());
  }

  /**
   * Resolves when it is this wait's turn after an announcement of `key`: the longest waiting
   * (earliest `since`) of this process is woken first. A waiter that tries and fails waits
   * again with its own `since`, so it keeps its place in line.
   */
  waitTurn(key: string, signal: AbortSignal, since: number): Promise<void> {
    if (!signal.aborted && this.#waiters.takePending(key)) return Promise.resolve();
    return this.#wait(key, signal, true, since);
  }

  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    return this.#listener.unsubscribe(this.#channel);
  }

  #wait(key: string, signal: AbortSignal, fair: boolean, since: number): Promise<void> {
    if (!this.#closed) void this.#listener.start();
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = () => {
        remove();
        reject(signal.reason);
      };
      const remove = this.#waiters.add(key, {
        since,
        fair,
        wake: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      });
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}
