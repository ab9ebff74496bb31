import type { Document } from 'mongodb';
import { expect, it } from 'vitest';
import type { MongoDialectOption } from '../src/index.js';
import { monitoredClient } from './helpers.js';
import { everyStore, uniqueName } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * A client created with the Atlas snippet's `serverApi: { version: '1', strict: true }`: a
 * real MongoDB refuses every command outside Stable API V1 with APIStrictError (323), so a
 * store that sends one fails at start-up. Neither stand-in enforces strictness (both accept
 * the API fields and answer anyway), so this test watches what is sent (driver command
 * monitoring) on every server; on a real MongoDB the server enforces it as well. The
 * conformance suite runs such stores too (conformance.test.ts).
 */
const servers = await openTestServers('stowage_stable_api');

/** The commands of Stable API V1 (MongoDB 5.0–8.0), as the server's `apiStrict` check knows them. */
const API_V1 = new Set([
  'abortTransaction', 'aggregate', 'authenticate', 'bulkWrite', 'collMod', 'commitTransaction', 'count', 'create',
  'createIndexes', 'delete', 'drop', 'dropDatabase', 'dropIndexes', 'endSessions', 'explain', 'find', 'findAndModify',
  'getMore', 'hello', 'insert', 'killCursors', 'listCollections', 'listDatabases', 'listIndexes', 'ping',
  'refreshSessions', 'update',
]);
/** Aggregation stages API V1 excludes. */
const NOT_IN_API_V1 = new Set(['$collStats', '$currentOp', '$indexStats', '$listLocalSessions', '$listSessions', '$planCacheStats', '$search', '$searchMeta']);

describeEachServer(servers, 'a store on a strict Stable API client', (s) => {
  for (const dialect of ['auto', 'pipeline', 'classic'] as MongoDialectOption[]) {
    it(`sends only commands of Stable API V1 (dialect ${dialect}), detection and schema included`, async () => {
      const { client, commands } = await monitoredClient(s, { serverApi: { version: '1', strict: true } });
      try {
        // A database of its own: detection runs once per client and database, and must be seen.
        const stores = everyStore({ client, database: uniqueName('api'), dialect });
        await stores.ready();
        const { kv, snapshots, locks, cache, breaker, checkpoints, idempotency, backend } = stores;
        const operations: (() => Promise<unknown>)[] = [
          () => kv.set('k', 'v', { ttl: 60_000 }),
          () => kv.get('k'),
          () => kv.keys('k*'),
          () => kv.setMany([{ key: 'a', value: '1' }, { key: 'b', value: '2' }]),
          () => kv.deleteMany(['a']),
          () => kv.compareAndSet('n', 'v', null),
          () => kv.delete('k'),
          () => kv.clearExpired(),
          () => snapshots.save('w', { a: 1 }),
          () => snapshots.load('w'),
          () => snapshots.list(),
          () => snapshots.tryAcquire('w'),
          () => locks.withLock('l', async () => undefined, { ttl: 10_000 }),
          () => locks.acquire('l', 10_000, 'x'),
          () => cache.set('k', 1, 60_000),
          () => cache.keys(),
          () => cache.clear(),
          () => breaker.recordFailure('svc', 2),
          () => breaker.recordSuccess('svc'),
          () => breaker.getState('svc'),
          () => checkpoints.save({ id: 'c1', taskId: 't', sequence: 1, timestamp: 0, progress: 0, data: {} }),
          () => checkpoints.cleanup('t', 0),
          () => idempotency.reserve('op', 60_000),
          () => backend.createItem({ process: 'p', id: 'i', state: 's', data: {} }),
          () => backend.findClaimable({ process: 'p', state: 's', includeUnclaimed: true, limit: 5 }),
        ];
        // A forced pipeline dialect on a server without pipelines fails its writes; the commands are what is looked at.
        for (const operation of operations) await (dialect === 'pipeline' && s.product !== 'mongodb' ? operation().catch(() => undefined) : operation());
        await stores.close();
      } finally {
        await client.close();
      }
      const names = [...new Set(commands.map((event) => event.commandName))];
      expect(names.filter((name) => !API_V1.has(name))).toEqual([]);
      expect(names).toEqual(expect.arrayContaining(['hello', 'find', 'update', 'findAndModify', 'createIndexes']));
      const stages = commands
        .filter((event) => event.commandName === 'aggregate')
        .flatMap((event) => (event.command.pipeline as Document[]).map((stage) => Object.keys(stage)[0]!));
      expect(stages.filter((stage) => NOT_IN_API_V1.has(stage))).toEqual([]);
      // The driver puts the API fields on every command outside a transaction's later statements and cursors' getMore.
      for (const event of commands.filter((candidate) => !['getMore', 'commitTransaction', 'abortTransaction', 'endSessions'].includes(candidate.commandName))) {
        if (event.command.txnNumber !== undefined && event.command.startTransaction !== true) continue;
        expect(event.command, event.commandName).toMatchObject({ apiVersion: '1', apiStrict: true });
      }
    });
  }
});
