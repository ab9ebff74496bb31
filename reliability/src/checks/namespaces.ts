/**
 * Namespaces: the prefix of a cache or of a snapshot store is a namespace. Two stores on one
 * table or collection whose prefixes start alike — caches `users:` and `users:admin:`, snapshot
 * stores `t1` and `t11` — must never see, list, clear or overwrite each other's entries. A
 * prefix glued to the key lets all of that through: `users:` + `admin:1` is `users:admin:` +
 * `1`, and `t1` + `1x` is `t11` + `x`, so the keys below are chosen to collide that way.
 * awaitly's key-value persistence keeps exactly that glued layout (the seeds' tables hold it),
 * so there the second of two such prefixes on one table must be refused instead.
 *
 * Proves: entries seen, listed, cleared (deleted) or overwritten across prefixes = 0.
 */
import { isStowageError, type CacheProvider, type JsonObject, type SnapshotStore } from '@stowage/core';
import { openStatePersistence } from '@stowage/core/adapter';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';

export type NamespacedCache = Pick<CacheProvider, 'set' | 'get' | 'has' | 'keys' | 'clear' | 'close'>;
export type NamespacedSnapshots = Pick<SnapshotStore<JsonObject>, 'save' | 'load' | 'list' | 'delete' | 'close'>;

export interface NamespaceStores {
  cache(prefix: string): Promise<NamespacedCache>;
  snapshots(prefix: string): Promise<NamespacedSnapshots>;
}

/** Crossings by kind; each is one entry of one store that another store's call reached. */
export interface Crossings {
  seen: number;
  listed: number;
  cleared: number;
  overwritten: number;
  details: string[];
  /** The second store was refused (`E_INVALID_OPTION`) beside the first: nothing could cross. */
  refused: boolean;
}

const crossings = (): Crossings => ({ seen: 0, listed: 0, cleared: 0, overwritten: 0, details: [], refused: false });
const total = (c: Crossings) => c.seen + c.listed + c.cleared + c.overwritten;

function count(result: Crossings, kind: 'seen' | 'listed' | 'cleared' | 'overwritten', failed: boolean, detail: string): void {
  if (!failed) return;
  result[kind] += 1;
  result.details.push(`${kind}: ${detail}`);
}

/** `users:` (outer) and `users:admin:` (inner): outer's `admin:N` and inner's `N` are the same glued key. */
async function cacheCrossings(stores: NamespaceStores): Promise<Crossings> {
  const result = crossings();
  const outer = await stores.cache('users:');
  const inner = await stores.cache('users:admin:');
  try {
    // Overwritten: both write the colliding key; each must read back its own value.
    await outer.set('admin:1', 'outer 1');
    await inner.set('1', 'inner 1');
    count(result, 'overwritten', (await outer.get('admin:1')) !== 'outer 1', "users: 'admin:1' changed by users:admin: '1'");
    count(result, 'overwritten', (await inner.get('1')) !== 'inner 1', "users:admin: '1' changed by users: 'admin:1'");
    // Seen: an entry written by one only is absent for the other.
    await outer.set('admin:2', 'outer 2');
    await inner.set('3', 'inner 3');
    count(result, 'seen', (await inner.get('2')) !== null || (await inner.has('2')), "users:admin: sees users: 'admin:2'");
    count(result, 'seen', (await outer.get('admin:3')) !== null || (await outer.has('admin:3')), "users: sees users:admin: '3'");
    // Listed: each lists its own keys only.
    const outerOwn = new Set(['admin:1', 'admin:2']);
    const innerOwn = new Set(['1', '3']);
    for (const key of await outer.keys('*')) count(result, 'listed', !outerOwn.has(key), `users: lists '${key}'`);
    for (const key of await inner.keys('*')) count(result, 'listed', !innerOwn.has(key), `users:admin: lists '${key}'`);
    // Cleared: clearing one leaves the other's entries.
    await inner.clear();
    for (const key of outerOwn) count(result, 'cleared', (await outer.get(key)) === null, `users:admin: clear() removed users: '${key}'`);
    await inner.set('1', 'inner 1');
    await outer.clear();
    count(result, 'cleared', (await inner.get('1')) === null, "users: clear() removed users:admin: '1'");
    await inner.clear();
  } finally {
    await outer.close();
    await inner.close();
  }
  return result;
}

/** `t1` (outer) and `t11` (inner): outer's `1x` and inner's `x` are the same glued id. */
async function snapshotCrossings(open: (prefix: string) => Promise<NamespacedSnapshots>): Promise<Crossings> {
  const result = crossings();
  const outer = await open('t1');
  let inner: NamespacedSnapshots;
  try {
    inner = await open('t11');
  } catch (error) {
    await outer.close();
    if (!isStowageError(error, 'E_INVALID_OPTION')) throw error;
    result.refused = true;
    return result;
  }
  try {
    await outer.save('1x', { by: 'outer' });
    await inner.save('x', { by: 'inner' });
    count(result, 'overwritten', (await outer.load('1x'))?.by !== 'outer', "t1 '1x' changed by t11 'x'");
    count(result, 'overwritten', (await inner.load('x'))?.by !== 'inner', "t11 'x' changed by t1 '1x'");
    await outer.save('1y', { by: 'outer' });
    await inner.save('z', { by: 'inner' });
    count(result, 'seen', (await inner.load('y')) !== null, "t11 sees t1 '1y'");
    count(result, 'seen', (await outer.load('1z')) !== null, "t1 sees t11 'z'");
    const outerOwn = new Set(['1x', '1y']);
    const innerOwn = new Set(['x', 'z']);
    for (const { id } of await outer.list({ limit: 100 })) count(result, 'listed', !outerOwn.has(id), `t1 lists '${id}'`);
    for (const { id } of await outer.list({ prefix: '1', limit: 100 })) count(result, 'listed', !outerOwn.has(id), `t1 list({ prefix: '1' }) lists '${id}'`);
    for (const { id } of await inner.list({ limit: 100 })) count(result, 'listed', !innerOwn.has(id), `t11 lists '${id}'`);
    // Deleted: deleting one's id leaves the other's colliding id.
    await inner.delete('x');
    count(result, 'cleared', (await outer.load('1x')) === null, "t11 delete('x') removed t1 '1x'");
    await inner.save('x', { by: 'inner' });
    await outer.delete('1x');
    count(result, 'cleared', (await inner.load('x')) === null, "t1 delete('1x') removed t11 'x'");
    for (const id of ['1y']) await outer.delete(id);
    for (const id of ['x', 'z']) await inner.delete(id);
  } finally {
    await outer.close();
    await inner.close();
  }
  return result;
}

export async function measureNamespaces(stores: NamespaceStores): Promise<{ cache: Crossings; snapshots: Crossings }> {
  return { cache: await cacheCrossings(stores), snapshots: await snapshotCrossings(stores.snapshots) };
}

/** awaitly's persistence on a key-value table of its own, each prefix on another store, as another process opens it. */
async function persistenceCrossings(backend: Backend): Promise<Crossings & { unlikeOpened: boolean }> {
  const table = 'reliability_namespaces_state';
  const open = async (prefix: string) => {
    const kv = await backend.kv({ table });
    try {
      return await openStatePersistence<JsonObject>(kv, prefix, { ownsStore: true });
    } catch (error) {
      await kv.close();
      throw error;
    }
  };
  const result = await snapshotCrossings(open);
  // Refusing every second prefix would isolate too: one that does not start like `t1` must open.
  const unlike = await open('tenant:1:').catch((error: unknown) => {
    if (isStowageError(error, 'E_INVALID_OPTION')) return null;
    throw error;
  });
  await unlike?.close();
  return { ...result, unlikeOpened: unlike !== null };
}

export async function namespaces(backend: Backend, report: BackendReport): Promise<void> {
  const check = 'namespaces';
  // Both stores of a pair on one table/collection of its own, as two parts of one application would share it.
  const f = await measureNamespaces({
    cache: (prefix) => backend.cache({ prefix, table: 'reliability_namespaces_cache' }),
    snapshots: (prefix) => backend.snapshots({ prefix, table: 'reliability_namespaces_snapshots' }),
  });
  const state = await persistenceCrossings(backend);
  report.expect(check, 'awaitly persistence t1 then t11, one table: t11 refused, tenant:1: opens', state.refused && state.unlikeOpened ? 'yes' : 'no', 'yes', state.refused && state.unlikeOpened);
  for (const [what, c] of [
    ['caches users: / users:admin:', f.cache],
    ['snapshots t1 / t11', f.snapshots],
    ['awaitly persistence t1 / t11', state],
  ] as const) {
    const breakdown = `seen ${c.seen}, listed ${c.listed}, cleared ${c.cleared}, overwritten ${c.overwritten}`;
    report.expect(check, `${what}: entries seen/listed/cleared/overwritten across`, total(c) === 0 ? 0 : `${total(c)} (${breakdown})`, '= 0', total(c) === 0);
    for (const detail of c.details.slice(0, 5)) report.note(`namespaces ${what}: ${detail}`);
  }
}
