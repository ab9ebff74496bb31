import { expect, it } from 'vitest';
import { MongoKeyValueStore, MongoProcessBackend, MongoSnapshotStore } from '../src/index.js';
import { eventually, storeOptions } from './helpers.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * Retention (issue 19): `snapshotRetention: { finishedAfter }` with `clearFinished()` and
 * `historyRetention` with `clearHistory()`, the options of @stowage/postgres. Documents are made
 * old by moving their times into the past through the driver, so nothing waits for a clock.
 */
const servers = await openTestServers('stowage_retention');

const DAY = 86_400_000;
const longAgo = () => new Date(Date.now() - 30 * DAY);
const snapshot = (status: string) => ({ execution: { status }, steps: { a: { status: 'completed' } } });

describeEachServer(servers, 'retention', (s) => {
  it('clearFinished deletes this prefix\'s old completed and failed snapshots, and keeps recent, running and other prefixes\' ones', async () => {
    const options = { ...storeOptions(s, 'snapshots'), snapshotRetention: { finishedAfter: DAY } };
    const store = new MongoSnapshotStore<object>({ ...options, prefix: 'orders:' });
    const other = new MongoSnapshotStore<object>({ ...options, prefix: 'orders:x:' });
    try {
      await store.save('old-completed', snapshot('completed'));
      await store.save('old-failed', snapshot('failed'));
      await store.save('old-running', snapshot('running')); // awaitly keeps a failed run as `running` to resume it
      await store.save('old-other-shape', { status: 'completed' });
      await store.save('old-finished-then-running', snapshot('completed'));
      await store.save('old-finished-then-running', snapshot('running'));
      await store.save('recent-completed', snapshot('completed'));
      await other.save('old-completed', snapshot('completed'));
      const collection = s.admin.db(s.database).collection<{ _id: string }>(options.collection);
      await collection.updateMany({ _id: { $not: /recent/ } }, { $set: { updatedAt: longAgo() } });

      expect(await store.clearFinished()).toBe(2);
      expect((await store.list()).map((item) => item.id).sort()).toEqual(['old-finished-then-running', 'old-other-shape', 'old-running', 'recent-completed']);
      expect(await other.load('old-completed')).toEqual(snapshot('completed'));
      expect(await store.clearFinished()).toBe(0);
      // A deleted snapshot's id is free again, and a finished snapshot saved anew is recent.
      await store.save('old-completed', snapshot('completed'));
      expect(await store.clearFinished()).toBe(0);
      expect(await store.load('old-completed')).toEqual(snapshot('completed'));
    } finally {
      await Promise.all([store.close(), other.close()]);
    }
  });

  it('clearFinished deletes in batches beyond one batch', async () => {
    const options = { ...storeOptions(s, 'snapshots'), snapshotRetention: { finishedAfter: DAY } };
    const store = new MongoSnapshotStore<object>(options);
    try {
      const count = 1_203; // RETENTION_BATCH (1 000) and some
      await store.save('wf-0', snapshot('completed'));
      await store.save('running', snapshot('running'));
      // The rest as copies of what save wrote (one insert instead of 1 202 saves).
      const collection = s.admin.db(s.database).collection<{ _id: string }>(options.collection);
      const { _id, ...saved } = (await collection.findOne({ _id: '\u0000wf-0' }))!;
      // Written old already: an update of every document takes FerretDB (SQLite) 16 s.
      await collection.insertMany(Array.from({ length: count - 1 }, (_, index) => ({ ...saved, updatedAt: longAgo(), _id: `\u0000wf-${index + 1}` })));
      await collection.updateMany({ _id: { $in: ['\u0000wf-0', '\u0000running'] } }, { $set: { updatedAt: longAgo() } });
      expect(await store.clearFinished()).toBe(count);
      expect((await store.list()).map((item) => item.id)).toEqual(['running']);
    } finally {
      await store.close();
    }
  });

  it('clearHistory deletes old transition records and keeps the creation, recent records and every item', async () => {
    const options = { ...storeOptions(s, 'process'), historyRetention: DAY };
    const backend = new MongoProcessBackend(options);
    try {
      const advance = async (id: string, version: number, from: string, to: string) => {
        const claimed = await backend.claim({ process: 'orders', itemId: id, state: from, version, owner: 'worker', lease: 60_000 });
        expect(claimed).not.toBeNull();
        return backend.transition({ process: 'orders', itemId: id, from, to, version, kind: 'advance', key: `${id}:${version}` });
      };
      await backend.createItem({ process: 'orders', id: 'a', state: 'new', data: { n: 1 } });
      await advance('a', 1, 'new', 'paid');
      await advance('a', 2, 'paid', 'shipped');
      await advance('a', 3, 'shipped', 'done');
      const collection = s.admin.db(s.database).collection(options.collection);
      await collection.updateMany({ itemId: 'a' }, { $set: { at: longAgo() } });
      await advance('a', 4, 'done', 'archived'); // recent
      await advance('a', 5, 'archived', 'purged'); // recent, current
      await backend.createItem({ process: 'orders', id: 'b', state: 'new', data: {} });
      await collection.updateMany({ itemId: 'b' }, { $set: { at: longAgo() } }); // old, but current

      expect(await backend.clearHistory()).toBe(3); // versions 2 to 4; 1 (creation), 5 (recent) and 6 (current) stay
      expect((await backend.history('orders', 'a')).map((record) => record.version)).toEqual([1, 5, 6]);
      expect(await backend.getItem('orders', 'a')).toMatchObject({ state: 'purged', version: 6, data: { n: 1 } });
      expect(await backend.getItem('orders', 'b')).toMatchObject({ state: 'new', version: 1 });
      // The item is still created once, and a late transition from a trimmed version is refused.
      expect((await backend.createItem({ process: 'orders', id: 'a', state: 'new', data: {} })).created).toBe(false);
      expect(await backend.transition({ process: 'orders', itemId: 'a', from: 'paid', to: 'shipped', version: 2, kind: 'advance', key: 'late' })).toBeNull();
      expect(await backend.clearHistory()).toBe(0);
    } finally {
      await backend.close();
    }
  });

  it('validates the options and refuses the on-demand calls without them (E_INVALID_OPTION)', async () => {
    const options = storeOptions(s, 'invalid');
    for (const snapshotRetention of [null, 5, [], { finishedAfter: 0 }, { finishedAfter: -1 }, { finishedAfter: 1.5 }, { finishedAfter: '1000' }]) {
      expect(() => new MongoSnapshotStore<object>({ ...options, snapshotRetention: snapshotRetention as never })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    for (const historyRetention of [0, -5, 2.5, '1000', null, Number.POSITIVE_INFINITY]) {
      expect(() => new MongoProcessBackend({ ...options, historyRetention: historyRetention as never })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    const store = new MongoSnapshotStore<object>(options);
    const backend = new MongoProcessBackend(options);
    try {
      await expect(store.clearFinished()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(backend.clearHistory()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    } finally {
      await Promise.all([store.close(), backend.close()]);
    }
  });

  it('the background sweeper runs every cleanupInterval ms: a finished snapshot past its retention goes without clearFinished(), a running one stays', async () => {
    const options = { ...storeOptions(s, 'swept'), snapshotRetention: { finishedAfter: DAY }, cleanupInterval: 20 };
    const store = new MongoSnapshotStore<object>(options);
    try {
      await store.save('old-completed', snapshot('completed'));
      await store.save('old-running', snapshot('running'));
      await s.admin.db(s.database).collection(options.collection).updateMany({}, { $set: { updatedAt: longAgo() } });
      expect(await eventually(async () => (await store.load('old-completed')) === null)).toBe(true);
      expect(await store.load('old-running')).toEqual(snapshot('running'));
    } finally {
      await store.close();
    }
  });

  it('cleanupInterval takes false, 0 (off) or a positive integer of ms a timer can wait, on every store, as on Postgres (E_INVALID_OPTION otherwise)', async () => {
    const options = storeOptions(s, 'interval');
    for (const cleanupInterval of [-1, 1.5, '1000', null, true, Number.NaN, 2_147_483_648]) {
      const refused = expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/^cleanupInterval must be false, 0 \(off\) or a positive integer number of ms up to 2147483647, got /) });
      expect(() => new MongoKeyValueStore({ ...options, cleanupInterval: cleanupInterval as never })).toThrow(refused);
      expect(() => new MongoProcessBackend({ ...options, historyRetention: DAY, cleanupInterval: cleanupInterval as never })).toThrow(refused);
    }
    for (const cleanupInterval of [false, 0, 1, 60_000, 2_147_483_647] as const) {
      await new MongoSnapshotStore<object>({ ...options, snapshotRetention: { finishedAfter: DAY }, cleanupInterval }).close();
    }
  });
});
