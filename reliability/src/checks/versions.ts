/**
 * Versions (ABA): a compare-and-set succeeds only against the incarnation it read. A version
 * read before a delete, or before a TTL expiry, must not match the entry created again under
 * the same key afterwards, however often that happens — even when the new incarnation was
 * written exactly as many times as the old one (which a "+1 per write, back to 1 after delete"
 * version would let through).
 *
 * Proves: stale compare-and-sets accepted = 0, for key-value entries (delete, expiry) and for
 * snapshots (delete, `save` with `expectedVersion`).
 */
import { isStowageError, type JsonObject, type KeyValueEntry, type KeyValueStore, type SnapshotStore } from '@stowage/core';
import type { Budget } from '../config.ts';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { formatMs, sleep } from '../util.ts';

/** What the check uses of a key-value store (a deliberately broken one implements just this). */
export type VersionedKv = Pick<KeyValueStore, 'set' | 'get' | 'getEntry' | 'delete' | 'compareAndSet' | 'close'>;
export type VersionedSnapshots = Pick<SnapshotStore<JsonObject>, 'save' | 'load' | 'loadVersioned' | 'delete' | 'close'>;

export interface VersionStores {
  kv(): Promise<VersionedKv>;
  snapshots(): Promise<VersionedSnapshots>;
}

export interface Tally {
  rounds: number;
  /** The stale compare-and-set was accepted (or its value landed). */
  staleAccepted: number;
  /** Anything else that went wrong (an error other than E_VERSION_CONFLICT, an entry that never expired). */
  problems: string[];
}

export interface VersionFigures {
  kvDelete: Tally;
  kvExpiry: Tally;
  snapshotDelete: Tally;
  durationMs: number;
}

/** How long an entry with a short TTL may take to disappear before that counts as a problem (a liveness bound). */
const EXPIRY_LIMIT_MS = 15_000;
/** Expiry rounds run this many keys at a time (each key is its own round). */
const EXPIRY_PARALLEL = 25;

const tally = (): Tally => ({ rounds: 0, staleAccepted: 0, problems: [] });

/** Runs the stale write: true when it was accepted, false on E_VERSION_CONFLICT; other errors propagate. */
async function staleAccepted(write: () => Promise<unknown>): Promise<boolean> {
  try {
    await write();
    return true;
  } catch (error) {
    if (isStowageError(error, 'E_VERSION_CONFLICT')) return false;
    throw error;
  }
}

async function round(result: Tally, fn: () => Promise<boolean>): Promise<void> {
  result.rounds += 1;
  try {
    if (await fn()) result.staleAccepted += 1;
  } catch (error) {
    result.problems.push(describeError(error));
  }
}

/** Key-value: set → read version → delete → set again → compare-and-set with the old version, on one key. */
async function kvAfterDelete(kv: VersionedKv, rounds: number): Promise<Tally> {
  const result = tally();
  const key = 'aba/deleted';
  for (let i = 0; i < rounds; i++) {
    await round(result, async () => {
      // Each round begins a new incarnation, written once, as the one that replaces it will be.
      await kv.delete(key);
      await kv.set(key, `old ${i}`);
      const read = await kv.getEntry(key);
      if (read === null) throw new Error(`round ${i}: the entry just written is missing`);
      await kv.delete(key);
      await kv.set(key, `new ${i}`);
      const accepted = await staleAccepted(() => kv.compareAndSet(key, `stale ${i}`, read.version));
      return accepted || (await kv.get(key)) !== `new ${i}`;
    });
  }
  return result;
}

/**
 * Key-value: set with a short TTL → read version → wait until it expired → set again →
 * compare-and-set with the old version. A slow server may let the entry expire before it is
 * read back; the round then starts over with twice the TTL (that is not what is measured).
 */
async function kvAfterExpiry(kv: VersionedKv, rounds: number, ttl: number): Promise<Tally> {
  const result = tally();
  const one = (i: number) =>
    round(result, async () => {
      const key = `aba/expired/${i}`;
      let read: KeyValueEntry | null = null;
      for (let attempt = 0, attemptTtl = ttl; read === null; attempt++, attemptTtl *= 2) {
        if (attempt === 5) throw new Error(`round ${i}: the entry expired before it could be read back, up to a ${attemptTtl / 2} ms TTL`);
        await kv.set(key, `old ${i}`, { ttl: attemptTtl });
        read = await kv.getEntry(key);
      }
      const deadline = performance.now() + EXPIRY_LIMIT_MS;
      while ((await kv.get(key)) !== null) {
        if (performance.now() > deadline) throw new Error(`round ${i}: an entry with a short TTL still readable after ${formatMs(EXPIRY_LIMIT_MS)}`);
        await sleep(ttl / 2);
      }
      await kv.set(key, `new ${i}`);
      const accepted = await staleAccepted(() => kv.compareAndSet(key, `stale ${i}`, read.version));
      return accepted || (await kv.get(key)) !== `new ${i}`;
    });
  for (let start = 0; start < rounds; start += EXPIRY_PARALLEL) {
    await Promise.all(Array.from({ length: Math.min(EXPIRY_PARALLEL, rounds - start) }, (_, j) => one(start + j)));
  }
  return result;
}

/** Snapshots: save → read version → delete → save again → save with `expectedVersion` = the old version, on one id. */
async function snapshotsAfterDelete(snapshots: VersionedSnapshots, rounds: number): Promise<Tally> {
  const result = tally();
  const id = 'aba/deleted';
  for (let i = 0; i < rounds; i++) {
    await round(result, async () => {
      await snapshots.delete(id);
      await snapshots.save(id, { round: i, incarnation: 'old' });
      const read = await snapshots.loadVersioned(id);
      if (read === null) throw new Error(`round ${i}: the snapshot just saved is missing`);
      await snapshots.delete(id);
      await snapshots.save(id, { round: i, incarnation: 'new' });
      const accepted = await staleAccepted(() => snapshots.save(id, { round: i, incarnation: 'stale' }, { expectedVersion: read.version }));
      return accepted || (await snapshots.load(id))?.incarnation !== 'new';
    });
  }
  return result;
}

export async function measureVersions(stores: VersionStores, budget: Budget['versions']): Promise<VersionFigures> {
  const started = performance.now();
  const kv = await stores.kv();
  const snapshots = await stores.snapshots();
  try {
    const [kvDelete, kvExpiry, snapshotDelete] = await Promise.all([
      kvAfterDelete(kv, budget.rounds),
      kvAfterExpiry(kv, budget.rounds, budget.ttl),
      snapshotsAfterDelete(snapshots, budget.rounds),
    ]);
    return { kvDelete, kvExpiry, snapshotDelete, durationMs: performance.now() - started };
  } finally {
    await kv.close();
    await snapshots.close();
  }
}

export async function versions(backend: Backend, report: BackendReport, budget: Budget['versions']): Promise<void> {
  const check = 'versions';
  // Tables of their own, so that no other check's keys share the version sequence's history.
  const f = await measureVersions(
    { kv: () => backend.kv({ table: 'reliability_versions_kv' }), snapshots: () => backend.snapshots({ table: 'reliability_versions_snapshots' }) },
    budget,
  );
  const rows: [string, string, Tally][] = [
    ['kv delete', `kv: version read, deleted, re-created (${f.kvDelete.rounds}×): stale CAS accepted`, f.kvDelete],
    ['kv expiry', `kv: version read, TTL expired, re-created (${f.kvExpiry.rounds}×): stale CAS accepted`, f.kvExpiry],
    ['snapshot delete', `snapshots: read, deleted, re-saved (${f.snapshotDelete.rounds}×): stale saves accepted`, f.snapshotDelete],
  ];
  for (const [name, measure, t] of rows) {
    report.expect(check, measure, t.staleAccepted, '= 0', t.staleAccepted === 0);
    report.expect(check, `${name} rounds that failed otherwise`, t.problems.length, '= 0', t.problems.length === 0);
    for (const problem of t.problems.slice(0, 3)) report.note(`versions ${name}: ${problem}`);
  }
  report.info(check, 'duration', formatMs(f.durationMs));
}
