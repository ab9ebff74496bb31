import { randomUUID } from 'node:crypto';
import { sleep } from '../clock.js';
import type { AcquireOptions } from '../contracts/locks.js';
import { StowageError } from '../errors.js';
import { assertValidDuration, assertValidKey, assertValidOwner, describeType } from '../keys.js';
import { callerError } from './store.js';

/**
 * The lock logic every backend shares, written once: the driver a backend supplies
 * ({@link LeaseDriver}), argument parsing, and the waiting line and loop. The handle and
 * `withLock` are in lock-handle.ts; {@link LockProviderBase} and the snapshot store's
 * `WorkflowLock` are built on both.
 */

/** A granted lease. */
export interface Lease {
  key: string;
  owner: string;
  fence: number;
  expiresAt: Date;
  /**
   * True when `owner` already held the live lease and the grant only renewed it (keeping its
   * fence). An acquisition aborted while in flight releases a new grant, never a renewal: the
   * caller held that lease before it called.
   */
  renewed?: boolean;
}

/**
 * What a backend implements for locks: one statement each, on the database's clock. Keys and
 * owners arrive valid.
 */
export interface LeaseDriver {
  /**
   * Grants the lease if the key is free, expired, or held by `owner` (who then keeps the
   * fence, and the lease says `renewed`); a new grant gets a fence higher than every fence
   * ever granted for the key. `null` while another owner holds a live lease; an attempt that
   * fails consumes no fence.
   */
  acquire(key: string, owner: string, ttl: number): Promise<Lease | null>;
  /** Sets a live lease of `owner` to end `ttl` ms from now; the new expiry, or `null` when not held. */
  extend(key: string, owner: string, ttl: number): Promise<Date | null>;
  /**
   * Ends `owner`'s lease; true when it was live. Wakes waiters where the backend can, unless
   * `handedOn`: the releasing provider then hands the key to a waiter of its own (see
   * {@link WaitLines}), and a backend whose announcement reaches other processes need not send
   * one (their waiters would only try and fail; they still poll).
   */
  release(key: string, owner: string, handedOn?: boolean): Promise<boolean>;
  /** Ends whoever's lease; the fence still never goes back. `handedOn` as for `release`. */
  forceRelease(key: string, handedOn?: boolean): Promise<void>;
  isHeld(key: string, owner: string): Promise<boolean>;
  /**
   * Resolves when a release of `key` is announced (a database wake-up), so a waiting
   * acquisition tries again before its next poll. Settles when `signal` aborts. Omit it to
   * poll only. `waitingSince` is when the acquisition began to wait (`performance.now()`), the
   * same on each of its attempts: a backend that wakes one waiter per release wakes the
   * earliest, so a waiter that tried and failed keeps its place in line.
   */
  waitForRelease?(key: string, signal: AbortSignal, waitingSince: number): Promise<void>;
  /**
   * True while every release (not `handedOn`) is announced to `waitForRelease` in every process,
   * this one included (a live LISTEN connection). The provider then lets its own next waiter
   * hear of such a release as the other processes' waiters do, rather than waking it ahead of
   * them. Omitted: false.
   */
  announcesReleases?(): boolean;
  /** Deletes expired leases (never their fences); how many. */
  clearExpired(): Promise<number>;
}

export const DEFAULT_POLL_INTERVAL = 50;

export function newOwnerToken(): string {
  return randomUUID();
}

export interface ParsedAcquireOptions {
  owner: string;
  /** The caller named the owner (it may hold the lease already); otherwise a fresh token. */
  ownerChosen: boolean;
  wait: number;
  signal: AbortSignal | undefined;
  pollInterval: number;
}

/** Validates `acquire(key, ttl, ownerOrOptions)` arguments; throws typed errors. */
export function parseAcquireArgs(key: unknown, ttl: unknown, ownerOrOptions: unknown): ParsedAcquireOptions {
  assertValidKey(key);
  assertValidDuration(ttl, 'ttl');
  const options: AcquireOptions =
    typeof ownerOrOptions === 'string' ? { owner: ownerOrOptions } : ((ownerOrOptions ?? {}) as AcquireOptions);
  if (typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `acquire options must be a string or an object, got ${describeType(options)}`);
  }
  const owner = options.owner ?? newOwnerToken();
  assertValidOwner(owner);
  const wait = options.wait ?? 0;
  if (typeof wait !== 'number' || !Number.isFinite(wait) || wait < 0) {
    throw new StowageError('E_INVALID_OPTION', 'wait must be a non-negative number of milliseconds');
  }
  const pollInterval = options.pollInterval ?? DEFAULT_POLL_INTERVAL;
  assertValidDuration(pollInterval, 'pollInterval');
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new StowageError('E_INVALID_OPTION', 'signal must be an AbortSignal');
  }
  return { owner, ownerChosen: options.owner !== undefined, wait, signal: options.signal, pollInterval };
}

/**
 * The acquisitions of one provider waiting for the same key, in arrival order. Only the first
 * in line asks the database; the others wait their turn, and a release through this provider
 * wakes the first at once. Without a line every waiter polls, so n waiters on one key (a
 * go-go-scope lock guarding a hot resource, awaitly workers on one workflow) cost n statements
 * per poll interval for a single hand-off.
 *
 * Across processes (several providers on one key), a release through this provider hands the
 * key to its own next waiter when that waiter already waited as this provider won the key (a
 * batch): the release is then not announced to other processes, whose first waiters would only
 * try and fail. Waiters that came later wait for a release announced to every process, so a
 * busy provider does not keep the key from the others beyond the batch that was waiting.
 */
export class WaitLines {
  readonly #lines = new Map<string, Line>();
  /** The driver's `announcesReleases` (see {@link announcing}): batches matter only while it is true. */
  #announces: () => boolean = () => false;

  /** Whether acquisitions of `key` wait here. */
  waiting(key: string): boolean {
    return this.#lines.has(key);
  }

  /** `since`: when the acquisition began to wait (`performance.now()`). */
  join(key: string, since: number): Place {
    const line = this.#lines.get(key);
    const place: Place = { since, turn: undefined, wake: undefined, handedOn: false, previous: line?.last, next: undefined };
    if (line === undefined) {
      this.#lines.set(key, { first: place, last: place, batchSince: -Infinity });
    } else {
      line.last.next = place;
      line.last = place;
    }
    return place;
  }

  /**
   * Leaves the line; `granted` when this place got the lease, which the next in line then waits
   * for. A first in line that leaves without it (aborted, or out of time) may have been woken by
   * a release it will not use: the next one asks at once instead, so that release is not lost.
   */
  leave(key: string, place: Place, granted: boolean): void {
    const line = this.#lines.get(key)!;
    const { previous, next } = place;
    if (previous === undefined) line.first = next!;
    else previous.next = next;
    if (next === undefined) line.last = previous!;
    else next.previous = previous;
    place.previous = place.next = undefined;
    // Won, not handed on: this provider's batch is the waiters here now.
    if (granted && !place.handedOn) line.batchSince = performance.now();
    if (previous === undefined && next === undefined) {
      this.#lines.delete(key);
    } else if (previous === undefined) {
      // Where releases are not announced to every process, every release here is handed on.
      next!.handedOn = granted && (next!.since <= line.batchSince || !this.#announces());
      if (!granted) (next!.wake = Promise.withResolvers<void>()).resolve();
      next!.turn?.(true);
    }
  }

  /**
   * `driver`, with every release and force-release waking the first in line of its key: at
   * once when it is handed the key (the release then says `handedOn`), or when the driver does
   * not announce releases to every process (then every release here hands the key on, as
   * before batches); otherwise it hears the announcement as the other processes' waiters do.
   */
  announcing(driver: LeaseDriver): LeaseDriver {
    this.#announces = () => driver.announcesReleases?.() === true;
    const releasing = async <T>(key: string, end: (handedOn: boolean) => Promise<T>): Promise<T> => {
      // Not announcing to every process, a release is announced as it always was (to processes
      // that can hear it) and wakes the first here at once.
      const announces = this.#announces();
      const result = await end(announces && this.#lines.get(key)?.first.handedOn === true);
      const first = this.#lines.get(key)?.first;
      if (first !== undefined && (first.handedOn || !announces)) {
        (first.wake ??= Promise.withResolvers<void>()).resolve();
      }
      return result;
    };
    return {
      acquire: (key, owner, ttl) => driver.acquire(key, owner, ttl),
      extend: (key, owner, ttl) => driver.extend(key, owner, ttl),
      release: (key, owner) => releasing(key, (handedOn) => driver.release(key, owner, handedOn)),
      forceRelease: (key) => releasing(key, (handedOn) => driver.forceRelease(key, handedOn)),
      isHeld: (key, owner) => driver.isHeld(key, owner),
      ...(driver.waitForRelease && { waitForRelease: driver.waitForRelease.bind(driver) }),
      ...(driver.announcesReleases && { announcesReleases: driver.announcesReleases.bind(driver) }),
      clearExpired: () => driver.clearExpired(),
    };
  }
}

/**
 * What `Promise.withResolvers<void>()` returns, spelled out: this type reaches the published
 * declarations, which must compile without lib es2024 (where `PromiseWithResolvers` is declared).
 */
interface Resolvers {
  promise: Promise<void>;
  resolve: (value: void) => void;
  reject: (reason?: unknown) => void;
}

/**
 * A waiting acquisition's place in line. Most of a long line only waits for its turn, so a place
 * holds little until it is first: `turn` is called when it becomes first, and `wake` resolves on
 * a release here (made by the first release or pause that needs it: an uncontended acquisition,
 * granted at its first attempt, never makes one).
 */
interface Place {
  /** When its acquisition began to wait (`performance.now()`). */
  readonly since: number;
  turn: ((came: true) => void) | undefined;
  wake: Resolvers | undefined;
  /**
   * First because the one ahead was granted the lease, and in its batch (see {@link WaitLines}):
   * its release here wakes this place and is not announced, so no announcement is waited for.
   */
  handedOn: boolean;
  /** The places before and after this one (a linked line: joining and leaving cost the same with 100,000 waiters as with one). */
  previous: Place | undefined;
  next: Place | undefined;
}

/** One key's line: its first and last place. */
interface Line {
  first: Place;
  last: Place;
  /**
   * When a waiter here last won the key without it being handed on: the places that waited
   * since before then are handed the key in turn (see {@link WaitLines}).
   */
  batchSince: number;
}

/**
 * Tries `driver.acquire` until it grants the lease, `wait` ms have passed (→ `null`), or a
 * signal aborts (→ rejects with its reason). Acquisitions of one provider wait in `lines`, in
 * the order they asked; the first in line tries at once (unless others were ahead of it), then
 * every `pollInterval` ms or sooner when a release here or the driver's announcement wakes it.
 * With `observed`, it counts those wake-ups (telemetry's hand-offs).
 *
 * Abort is final: a lease granted by an attempt that was already in flight when a signal
 * aborted is released again, so an aborted acquisition never leaves a lease behind (a renewal
 * stays: the caller held that lease before). It rejects with the signal's reason, unchanged.
 */
export async function acquireWithWait(
  driver: LeaseDriver,
  lines: WaitLines,
  key: string,
  ttl: number,
  options: ParsedAcquireOptions,
  signals: readonly AbortSignal[],
  observed?: { wakeups: number },
): Promise<Lease | null> {
  const signal = signals.length === 1 ? signals[0]! : AbortSignal.any([...signals]);
  throwIfAborted(signal);
  const waitingSince = performance.now();
  const deadline = waitingSince + options.wait;
  const attempt = async (): Promise<Lease | null> => {
    const lease = await driver.acquire(key, options.owner, ttl);
    if (lease !== null && !lease.renewed && signal.aborted) await driver.release(key, options.owner).catch(() => undefined);
    throwIfAborted(signal);
    return lease;
  };

  // A caller-chosen owner asks at once, as it may hold the lease already, and so does a call
  // that does not wait; others queue in the order they asked.
  const askedFirst = options.ownerChosen || options.wait === 0;
  if (askedFirst) {
    const lease = await attempt();
    if (lease !== null || performance.now() >= deadline) return lease;
  }
  // Nobody here waits for the key (the uncontended acquire): this place asks at once and makes
  // no wake unless it has to wait; its place only lines up whoever comes during the attempt.
  const alone = !lines.waiting(key);
  const place = lines.join(key, waitingSince);
  let lease: Lease | null = null;
  try {
    if (!alone && !(await waitForTurn(place, deadline - performance.now(), signal))) return null;
    // First in line: ask at once if nobody was ahead, else wait for a release first.
    for (let again = askedFirst || !alone; ; again = true) {
      if (again) {
        const remaining = deadline - performance.now();
        if (remaining <= 0) return null;
        const woken = await pause(Math.min(options.pollInterval, remaining), signal, (paused) => [
          (place.wake ??= Promise.withResolvers<void>()).promise,
          ...(driver.waitForRelease && !place.handedOn ? [driver.waitForRelease(key, paused, waitingSince)] : []),
        ]);
        if (woken && observed) observed.wakeups++;
      }
      // A release during the attempt below makes a resolved wake: the next pause ends at once.
      place.wake = undefined;
      lease = await attempt();
      if (lease !== null) return lease;
      // Someone else holds it now (another process, an expired lease taken): listen for its release.
      place.handedOn = false;
    }
  } finally {
    lines.leave(key, place, lease !== null);
  }
}

/**
 * Waits at most `ms` for `place`'s turn; true when it came. Rejects with `signal`'s reason.
 * Most of a long line waits here, so a waiter holds one promise, one callback and a timer (a
 * {@link pause} builds an `AbortController` and more for each).
 */
function waitForTurn(place: Place, ms: number, signal: AbortSignal): Promise<boolean> {
  if (ms <= 0) return Promise.resolve(false);
  return new Promise((resolve, reject) => {
    // Called with true by the turn, false by the timer, nothing by an abort.
    const settle = (came?: boolean) => {
      clearTimeout(timer);
      stopListening();
      place.turn = undefined;
      if (signal.aborted) reject(callerError(signal.reason));
      else resolve(came === true);
    };
    const timer = setTimeout(settle, ms, false);
    const stopListening = onAbort(signal, settle);
    place.turn = settle;
  });
}

/**
 * Waits at most `ms` for the first of the promises `wakes` returns (given a signal that aborts
 * when the pause ends); true when one of them came first. Rejects with `signal`'s reason.
 */
async function pause(ms: number, signal: AbortSignal, wakes: (paused: AbortSignal) => Promise<unknown>[]): Promise<boolean> {
  if (ms <= 0) return false;
  const paused = new AbortController();
  const stopListening = onAbort(signal, () => paused.abort(signal.reason));
  let woken = false;
  try {
    const awake = wakes(paused.signal).map((wake) => wake.then(() => void (paused.signal.aborted || (woken = true))));
    await Promise.race([sleep(ms, paused.signal), ...awake]);
  } catch (error) {
    if (!signal.aborted) throw error;
  } finally {
    // With a reason of its own: an abort without one builds a DOMException (and its stack) per pause.
    paused.abort(PAUSE_ENDED);
    stopListening();
  }
  throwIfAborted(signal);
  return woken;
}

/** The reason a pause's own signal aborts with when the pause ends. */
const PAUSE_ENDED = Symbol('pause ended');

/** The callbacks waiting for each signal's abort, behind one listener per signal (see {@link onAbort}). */
const abortCallbacks = new WeakMap<AbortSignal, Set<() => void>>();

/**
 * Calls `callback` once when `signal` aborts; returns what stops that. Every waiter of a
 * provider waits on its one close signal: an `EventTarget` looks through its listeners on each
 * add and remove, so 100,000 waiters with a listener each took minutes to enqueue. Here the
 * signal has one listener, and a waiter joins and leaves a set.
 */
function onAbort(signal: AbortSignal, callback: () => void): () => void {
  let callbacks = abortCallbacks.get(signal);
  if (callbacks === undefined) {
    const registered = new Set<() => void>();
    abortCallbacks.set(signal, (callbacks = registered));
    signal.addEventListener('abort', () => {
      abortCallbacks.delete(signal);
      for (const each of registered) each();
    }, { once: true });
  }
  callbacks.add(callback);
  return () => void callbacks.delete(callback);
}

/** Rejects with the signal's reason, as the caller's own error (see `callerError`). */
function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw callerError(signal.reason);
}
