import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import pg from 'pg';
import { clientConfigOf, type PostgresPool } from './connection.js';
import { quoteIdentifier } from './schema.js';

/** How long the start-up probe waits for its own NOTIFY before deciding LISTEN does not work. */
const PROBE_TIMEOUT = 2000;
/** After the listening connection is lost, wait this long before opening another. */
const RECONNECT_DELAY = 1000;

/**
 * One LISTEN connection per lock provider, opened on first need, that wakes waiting
 * acquisitions when a release of their key is announced with `pg_notify`.
 *
 * Whether LISTEN works is detected, not assumed: after LISTEN the connection sends itself a
 * probe NOTIFY through the pool. Behind PgBouncer in transaction mode, or PGlite through its
 * socket server (one shared session), the probe never reaches the listening connection;
 * wake-ups are then off and waiting falls back to polling.
 */
export class ReleaseWakeups {
  readonly #pool: PostgresPool;
  readonly #channel: string;
  readonly #waiters = new Map<string, Set<() => void>>();
  #client: pg.Client | undefined;
  #starting: Promise<boolean> | undefined;
  #supported: boolean | undefined;
  #probe: { token: string; resolve: (works: boolean) => void } | undefined;
  #retryAt = 0;
  #closed = false;

  constructor(pool: PostgresPool, channel: string) {
    this.#pool = pool;
    this.#channel = channel;
  }

  /** True once LISTEN was seen to work on this server. */
  get supported(): boolean {
    return this.#supported === true;
  }

  /** Opens the listening connection if needed; resolves whether wake-ups work. */
  start(): Promise<boolean> {
    if (this.#closed || this.#supported === false) return Promise.resolve(false);
    if (this.#client) return Promise.resolve(true);
    if (performance.now() < this.#retryAt) return Promise.resolve(this.supported);
    this.#starting ??= this.#connect().finally(() => (this.#starting = undefined));
    return this.#starting;
  }

  /** Resolves when a release of `key` is announced; rejects with the reason when `signal` aborts. */
  wait(key: string, signal: AbortSignal): Promise<void> {
    void this.start();
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      let waiters = this.#waiters.get(key);
      if (!waiters) this.#waiters.set(key, (waiters = new Set()));
      const done = () => {
        waiters.delete(wake);
        if (waiters.size === 0 && this.#waiters.get(key) === waiters) this.#waiters.delete(key);
        signal.removeEventListener('abort', onAbort);
      };
      const wake = () => {
        done();
        resolve();
      };
      const onAbort = () => {
        done();
        reject(signal.reason);
      };
      waiters.add(wake);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#starting?.catch(() => undefined);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }

  async #connect(): Promise<boolean> {
    const config = clientConfigOf(this.#pool);
    if (!config) return (this.#supported = false);
    // The pool's own settings (pg.Pool keeps the password non-enumerable: pass the object, never a copy).
    const client = new pg.Client(config);
    client.on('error', () => this.#lost(client));
    client.on('end', () => this.#lost(client));
    client.on('notification', (message) => {
      if (message.channel !== this.#channel) return;
      const payload = message.payload ?? '';
      if (this.#probe?.token === payload) this.#probe.resolve(true);
      else for (const wake of [...(this.#waiters.get(payload) ?? [])]) wake();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdentifier(this.#channel)}`);
      if (this.#supported === undefined) {
        const works = await this.#sendProbe();
        this.#supported = works;
        if (!works) {
          await client.query(`UNLISTEN ${quoteIdentifier(this.#channel)}`).catch(() => undefined);
          await client.end().catch(() => undefined);
          return false;
        }
      }
      if (this.#closed) {
        await client.end().catch(() => undefined);
        return false;
      }
      this.#client = client;
      return true;
    } catch {
      await client.end().catch(() => undefined);
      this.#retryAt = performance.now() + RECONNECT_DELAY;
      // A server without LISTEN support fails here on first try; a known-good one is retried later.
      if (this.#supported === undefined) this.#supported = false;
      return this.supported;
    }
  }

  /** NOTIFY through the pool and see who receives it: the listener (works) or the sender (shared session). */
  async #sendProbe(): Promise<boolean> {
    const token = `stowage-probe:${randomUUID()}`;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = new Promise<boolean>((resolve) => {
      this.#probe = { token, resolve };
      timer = setTimeout(() => resolve(false), PROBE_TIMEOUT);
    });
    const sender = await this.#pool.connect();
    const misrouted = (message: { payload?: string }) => {
      if (message.payload === token) this.#probe?.resolve(false);
    };
    const events = sender as unknown as Partial<EventEmitter>;
    events.on?.('notification', misrouted);
    try {
      await sender.query('SELECT pg_notify($1, $2)', [this.#channel, token]);
      return await outcome;
    } finally {
      clearTimeout(timer);
      this.#probe = undefined;
      events.off?.('notification', misrouted);
      sender.release();
    }
  }

  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#retryAt = performance.now() + RECONNECT_DELAY;
  }
}
