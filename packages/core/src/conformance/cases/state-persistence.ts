import { expect } from 'vitest';
import type { KeyValueStore } from '../../contracts/kv.js';
import type { JsonObject } from '../../json.js';
import { createStatePersistence } from '../../persistence.js';
import { defineCases } from '../harness.js';
import { expectReject } from '../helpers.js';

/**
 * awaitly's key-value persistence (`createStatePersistence`, and the adapters'
 * `createPostgresPersistence` / `createMongoPersistence`) keeps awaitly's own layout, one key
 * `prefix + id`, so the seeds' tables read as they are. In that layout a prefix is a namespace
 * only if no other prefix on the same store starts like it: `t1` + `1:invoice` is `t11` +
 * `:invoice`. Each `kv()` below is another store on the same table, as another process would
 * open it.
 */
/** The persistence as `durable.run` would hold it, on plain JSON snapshots. */
const persistence = (kv: KeyValueStore, prefix: string) => createStatePersistence<JsonObject>(kv, prefix);

export const statePersistenceCases = defineCases('KeyValueStore', (it) => {
  it('awaitly state persistence: a prefix that starts like one in use on the same store is refused, from any process', async (s) => {
    const [first, second, third] = [await s.kv(), await s.kv(), await s.kv()];
    const tenant1 = persistence(first, 't1');
    await tenant1.save('1:invoice', { owner: 't1' });
    for (const [prefix, kv] of [['t11', second], ['t', third], ['t1x', first]] as const) {
      const other = persistence(kv, prefix);
      await expectReject(() => other.load(':invoice'), 'E_INVALID_OPTION', `prefix "${prefix}" beside "t1"`);
      await expectReject(() => other.save(':invoice', { owner: prefix }), 'E_INVALID_OPTION', `save under "${prefix}" beside "t1"`);
      await expectReject(() => other.list(), 'E_INVALID_OPTION', `list under "${prefix}" beside "t1"`);
    }
    // Nothing of t1's was touched, and the same prefix opens again (another process of the same application).
    const again = persistence(second, 't1');
    expect(await again.load('1:invoice')).toEqual({ owner: 't1' });
    expect((await again.list()).map((item) => item.id)).toEqual(['1:invoice']);
    // Prefixes that do not start alike share the store.
    const tenantA = persistence(second, 'tenant:1:');
    const tenantB = persistence(third, 'tenant:11:');
    await tenantA.save('x', { owner: 'tenant:1:' });
    await tenantB.save('x', { owner: 'tenant:11:' });
    expect(await tenantA.load('x')).toEqual({ owner: 'tenant:1:' });
    expect(await tenantB.load('x')).toEqual({ owner: 'tenant:11:' });
    expect((await tenantB.list()).map((item) => item.id)).toEqual(['x']);
  });

  it('awaitly state persistence: the record of prefixes in use is no snapshot, even of the empty prefix', async (s) => {
    const store = persistence(await s.kv(), '');
    await store.save('wf', { n: 1 });
    expect((await store.list()).map((item) => item.id)).toEqual(['wf']);
    expect((await store.listPage({ limit: 1 })).nextCursor).toBeNull();
    // The empty prefix starts like every other.
    const app = persistence(await s.kv(), 'app:');
    await expectReject(() => app.list(), 'E_INVALID_OPTION', 'prefix "app:" beside ""');
  });
});
