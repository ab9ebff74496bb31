/**
 * Shutdown and abort.
 *
 * close() under load: stores get `inFlight` calls (kv set, snapshot save, cache set) and a lock
 * provider has an acquisition waiting for a held key; then `close()` is called on all of them —
 * once in the same tick as the calls, once after the first call settled. Proves: no call is
 * left pending (each settles within a generous liveness bound), the waiting acquisition ends
 * with E_CLOSED, the calls already made succeed, and every write that was acknowledged can be
 * read back over fresh stores.
 *
 * Abort racing a release: a holder releases a key while a waiting acquisition (`acquire` or
 * `withLock`) for it is aborted, in varying interleavings. Proves: when the acquisition reports
 * the abort, it left no lease behind (the key is free at once), and a `withLock` body never
 * starts once the caller's signal has aborted.
 */
import {
  isStowageError,
  type CacheProvider,
  type JsonObject,
  type KeyValueStore,
  type LockHandle,
  type SnapshotStore,
  type WithLockOptions,
} from '@stowage/core';
import type { Budget } from '../config.ts';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { formatMs, settleWithin, sleep } from '../util.ts';

export type ShutdownKv = Pick<KeyValueStore, 'set' | 'getMany' | 'close'>;
export type ShutdownSnapshots = Pick<SnapshotStore<JsonObject>, 'save' | 'load' | 'close'>;
export type ShutdownCache = Pick<CacheProvider, 'set' | 'get' | 'close'>;

/** What the abort race uses of a lock provider (a deliberately broken one implements just this). */
export interface AbortableLocks {
  acquire(key: string, ttl: number, options: { wait: number; signal?: AbortSignal; pollInterval?: number }): Promise<LockHandle | null>;
  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T>;
  close(): Promise<void>;
}

export interface ShutdownStores {
  kv(): Promise<ShutdownKv>;
  snapshots(): Promise<ShutdownSnapshots>;
  cache(): Promise<ShutdownCache>;
  locks(): Promise<AbortableLocks>;
}

export interface CloseFigures {
  calls: number;
  pending: number;
  failed: string[];
  acknowledged: number;
  lost: string[];
  /** Outcome of each waiting acquisition: 'E_CLOSED', 'granted', 'pending', or what it rejected with. */
  waiting: string[];
  closeHung: number;
}

/** How long a call may take to settle after close() before it counts as left pending: a liveness bound, not a timing. */
const SETTLE_LIMIT_MS = 30_000;

type Outcome = { status: 'pending' } | { status: 'fulfilled'; value: unknown } | { status: 'rejected'; reason: unknown };

function track(promise: Promise<unknown>): { promise: Promise<unknown>; outcome: Outcome } {
  const tracked: { promise: Promise<unknown>; outcome: Outcome } = { promise, outcome: { status: 'pending' } };
  tracked.promise = promise.then(
    (value) => void (tracked.outcome = { status: 'fulfilled', value }),
    (reason: unknown) => void (tracked.outcome = { status: 'rejected', reason }),
  );
  return tracked;
}

/** One round: calls in flight and a waiting acquisition, then close(); `afterFirst`: close once the first call settled. */
async function closeRound(stores: ShutdownStores, inFlight: number, afterFirst: boolean, settleLimitMs: number, figures: CloseFigures): Promise<void> {
  const tag = afterFirst ? 'later' : 'at-once';
  const kv = await stores.kv();
  const snapshots = await stores.snapshots();
  const cache = await stores.cache();
  const holder = await stores.locks();
  const waiter = await stores.locks();
  const lockKey = `close/${tag}/held`;
  const held = await holder.acquire(lockKey, 60_000, { wait: 0 });
  if (held === null) throw new Error(`could not take ${lockKey}`);
  try {
    const waiting = track(waiter.acquire(lockKey, 60_000, { wait: 60_000, pollInterval: 50 }));
    const calls = Array.from({ length: inFlight }, (_, i) => {
      const name = `close/${tag}/${i}`;
      switch (i % 3) {
        case 0:
          return track(kv.set(name, `value ${i}`));
        case 1:
          return track(snapshots.save(name, { i }));
        default:
          return track(cache.set(name, i));
      }
    });
    if (afterFirst) await Promise.race(calls.map((call) => call.promise));
    const closing = track(Promise.all([kv.close(), snapshots.close(), cache.close(), waiter.close()]));
    await settleWithin(settleLimitMs, () => Promise.all([...calls, waiting, closing].map((call) => call.promise)));

    figures.calls += calls.length;
    figures.pending += calls.filter((call) => call.outcome.status === 'pending').length;
    if (closing.outcome.status === 'pending') figures.closeHung += 1;
    const w = waiting.outcome;
    figures.waiting.push(
      w.status === 'pending'
        ? 'pending'
        : w.status === 'fulfilled'
          ? 'granted'
          : isStowageError(w.reason, 'E_CLOSED')
            ? 'E_CLOSED'
            : describeError(w.reason),
    );
    if (w.status === 'fulfilled' && w.value) await (w.value as LockHandle).release().catch(() => undefined);
    for (const [i, call] of calls.entries()) {
      if (call.outcome.status === 'rejected') figures.failed.push(`call ${i}: ${describeError(call.outcome.reason)}`);
    }
    const acknowledged = calls.flatMap((call, i) => (call.outcome.status === 'fulfilled' ? [i] : []));
    figures.acknowledged += acknowledged.length;
    figures.lost.push(...(await lostWrites(stores, tag, acknowledged)));
  } finally {
    await held.release().catch(() => undefined);
    await holder.close();
  }
}

/** Reads every acknowledged write of a round back over fresh stores; returns the missing ones. */
async function lostWrites(stores: ShutdownStores, tag: string, acknowledged: number[]): Promise<string[]> {
  const kv = await stores.kv();
  const snapshots = await stores.snapshots();
  const cache = await stores.cache();
  const lost: string[] = [];
  try {
    const kvIndexes = acknowledged.filter((i) => i % 3 === 0);
    const values = await kv.getMany(kvIndexes.map((i) => `close/${tag}/${i}`));
    kvIndexes.forEach((i, j) => values[j] !== `value ${i}` && lost.push(`kv close/${tag}/${i}`));
    for (const i of acknowledged.filter((i) => i % 3 === 1)) {
      if ((await snapshots.load(`close/${tag}/${i}`))?.i !== i) lost.push(`snapshot close/${tag}/${i}`);
    }
    for (const i of acknowledged.filter((i) => i % 3 === 2)) {
      if ((await cache.get(`close/${tag}/${i}`)) !== i) lost.push(`cache close/${tag}/${i}`);
    }
  } finally {
    await Promise.all([kv.close(), snapshots.close(), cache.close()]);
  }
  return lost;
}

export async function measureClose(stores: ShutdownStores, inFlight: number, settleLimitMs = SETTLE_LIMIT_MS): Promise<CloseFigures> {
  const figures: CloseFigures = { calls: 0, pending: 0, failed: [], acknowledged: 0, lost: [], waiting: [], closeHung: 0 };
  for (const afterFirst of [false, true]) await closeRound(stores, inFlight, afterFirst, settleLimitMs, figures);
  return figures;
}

export interface AbortFigures {
  rounds: number;
  /** Acquisitions that reported the abort (the rest got the lock: the release won). */
  aborted: number;
  /** Acquisitions that reported the abort and left the key held. */
  leftBehind: number;
  /** Acquisitions that handed out a lease although their signal had aborted before they settled. */
  grantedAfterAbort: number;
  bodiesAfterAbort: number;
  pending: number;
  /** Rejections that were not the caller's abort reason, and other surprises. */
  problems: string[];
}

/** Pauses between the completed release and the abort: around the time a woken or polling waiter tries again. */
const ABORT_DELAYS_MS = [0, 1, 2, 4, 7, 11];

/**
 * The holder releases and the waiter's signal aborts, in one of eight interleavings: release
 * then abort in one tick, abort then release, or abort 0–11 ms after the release completed —
 * when the waiter may be asleep, trying again, or just granted.
 */
async function race(variant: number, release: () => Promise<void>, abort: () => void): Promise<void> {
  if (variant === 0) {
    const released = release();
    abort();
    return released;
  }
  if (variant === 1) {
    abort();
    return release();
  }
  await release();
  await sleep(ABORT_DELAYS_MS[(variant - 2) % ABORT_DELAYS_MS.length]!);
  abort();
}

export async function measureAbortRace(stores: Pick<ShutdownStores, 'locks'>, rounds: number, settleLimitMs = SETTLE_LIMIT_MS): Promise<AbortFigures> {
  const figures: AbortFigures = { rounds: 0, aborted: 0, leftBehind: 0, grantedAfterAbort: 0, bodiesAfterAbort: 0, pending: 0, problems: [] };
  const holder = await stores.locks();
  const waiter = await stores.locks();
  try {
    for (let round = 0; round < rounds; round++) {
      const key = `abort/${round}`;
      const held = await holder.acquire(key, 30_000, { wait: 0 });
      if (held === null) {
        figures.problems.push(`round ${round}: could not take ${key}`);
        continue;
      }
      figures.rounds += 1;
      const controller = new AbortController();
      const reason = new Error(`reliability abort ${round}`);
      const useWithLock = round % 2 === 1;
      const attempt = useWithLock
        ? waiter.withLock(
            key,
            async () => {
              if (controller.signal.aborted) figures.bodiesAfterAbort += 1;
              return null;
            },
            { ttl: 30_000, wait: 30_000, signal: controller.signal, pollInterval: 10 },
          )
        : waiter.acquire(key, 30_000, { wait: 30_000, signal: controller.signal, pollInterval: 10 });
      // Whether the signal had aborted when the acquisition settled: abort() runs in a task of
      // its own, never between the provider's last check and this callback.
      let abortedBeforeSettled = false;
      const observed = attempt.then((value) => {
        abortedBeforeSettled = controller.signal.aborted;
        return value;
      });
      // Judged below, once the race is over; the abort can reject it before then.
      observed.catch(() => undefined);
      // Let the waiter's first attempt find the key held, most of the time.
      if (round % 3 !== 0) await sleep(1);
      await race(Math.floor(round / 2) % (2 + ABORT_DELAYS_MS.length), () => held.release(), () => controller.abort(reason));
      const outcome = await settleWithin(settleLimitMs, () => observed);
      if (outcome.status === 'hung') {
        figures.pending += 1;
        continue;
      }
      if (outcome.status === 'fulfilled') {
        // The release won: the waiter got the lock (withLock has released it already) — unless
        // the caller had aborted by then, and got a lease it no longer wanted.
        if (!useWithLock && outcome.value) {
          if (abortedBeforeSettled) figures.grantedAfterAbort += 1;
          await (outcome.value as LockHandle).release();
        }
        continue;
      }
      if (outcome.reason !== reason) figures.problems.push(`round ${round}: rejected with ${describeError(outcome.reason)}, not the abort reason`);
      figures.aborted += 1;
      // The abort was reported: the key must be free at once.
      const check = await holder.acquire(key, 30_000, { wait: 0 });
      if (check === null) figures.leftBehind += 1;
      else await check.release();
    }
  } finally {
    await holder.close();
    await waiter.close();
  }
  return figures;
}

export async function shutdown(backend: Backend, report: BackendReport, budget: Budget['shutdown']): Promise<void> {
  const check = 'shutdown';
  const stores: ShutdownStores = {
    kv: () => backend.kv(),
    snapshots: () => backend.snapshots(),
    cache: () => backend.cache(),
    locks: () => backend.locks(),
  };
  const started = performance.now();
  const close = await measureClose(stores, budget.inFlight);
  report.expect(check, `close() with ${budget.inFlight} calls in flight (×2): calls left pending`, close.pending, '= 0', close.pending === 0);
  report.expect(check, 'calls made before close() that failed', close.failed.length, '= 0', close.failed.length === 0);
  report.expect(check, `acknowledged writes lost (of ${close.acknowledged})`, close.lost.length, '= 0', close.lost.length === 0);
  const closedWaits = close.waiting.filter((outcome) => outcome === 'E_CLOSED').length;
  report.expect(check, 'waiting acquire ended by close() with E_CLOSED', `${closedWaits} of ${close.waiting.length}`, 'all', closedWaits === close.waiting.length);
  report.expect(check, `close() still pending after ${formatMs(SETTLE_LIMIT_MS)}`, close.closeHung, '= 0', close.closeHung === 0);
  for (const detail of [...close.failed, ...close.lost].slice(0, 5)) report.note(`shutdown close(): ${detail}`);
  for (const outcome of close.waiting.filter((o) => o !== 'E_CLOSED')) report.note(`shutdown close(): waiting acquire ended with ${outcome}`);

  const abort = await measureAbortRace(stores, budget.abortRounds);
  const leftBehind = abort.leftBehind + abort.grantedAfterAbort;
  report.expect(
    check,
    `abort racing a release (${abort.rounds} rounds): leases left behind after an abort`,
    leftBehind === 0 ? 0 : `${leftBehind} (key held ${abort.leftBehind}, granted after abort ${abort.grantedAfterAbort})`,
    '= 0',
    leftBehind === 0,
  );
  report.expect(check, 'withLock bodies started after abort', abort.bodiesAfterAbort, '= 0', abort.bodiesAfterAbort === 0);
  report.expect(check, 'acquisitions still pending after the race', abort.pending, '= 0', abort.pending === 0);
  report.expect(check, 'aborted acquisitions not rejected with the abort reason', abort.problems.length, '= 0', abort.problems.length === 0);
  report.expect(check, 'acquisitions that reported the abort (the race was run)', abort.aborted, '≥ 1', abort.aborted >= 1);
  report.info(check, 'acquisitions that got the lock instead (the release won)', abort.rounds - abort.aborted - abort.pending);
  report.info(check, 'duration', formatMs(performance.now() - started));
  for (const problem of abort.problems.slice(0, 5)) report.note(`shutdown abort race: ${problem}`);
}
