import type { ConformanceAdapter } from '@stowage/core/conformance';
import {
  describeCacheProvider,
  describeCheckpointStore,
  describeCircuitBreakerStore,
  describeIdempotencyStore,
  describeKeyValueStore,
  describeLockProvider,
} from '@stowage/core/conformance';
import { adoptGoGoScope } from '../src/adopt.js';
import { MongoCacheProvider, MongoCheckpointStore, MongoCircuitBreakerStore, MongoIdempotencyStore, MongoKeyValueStore, MongoLockProvider } from '../src/index.js';
import { awaitlyMongoCollection, awaitlyMongoSet, goGoScopeCollections, goGoScopeWriter } from './legacy.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers, type OpenedTestServer } from './server.js';

/**
 * The core conformance cases, unchanged, on collections that awaitly-mongo and go-go-scope's
 * MongoDB adapters created and wrote (their indexes, and documents of another key prefix than
 * the cases use), once stowage adopted them: what the stores promise holds there too.
 * go-go-scope's documents are adopted in place, or, on jongodb (which cannot drop an index),
 * moved into stowage's collections.
 */
const servers = await openTestServers('stowage_adopted');

function adoptedAdapter(server: OpenedTestServer): ConformanceAdapter {
  return {
    name: `adopted collections (${server.label})`,
    createContext() {
      const stem = uniqueName('a');
      const db = server.admin.db(server.database);
      const base = { url: server.url, database: server.database };
      const legacy = { locks: `${stem}_locks`, circuit: `${stem}_circuit`, cache: `${stem}_cache`, idempotency: `${stem}_idem`, checkpoints: `${stem}_cp` };
      const target = (name: string) => (server.product === 'jongodb' ? `${name}_stowage` : name);
      const kvName = `${stem}_workflow_state`;
      let goGoScope: Promise<void> | undefined;
      let awaitly: Promise<void> | undefined;
      const adoptGoGoScopeCollections = () =>
        (goGoScope ??= (async () => {
          const collections = await goGoScopeCollections(db, legacy);
          const app = goGoScopeWriter(collections, 'gs:');
          await app.acquire('held', 60_000, 'go-go-scope-worker');
          await app.setState('service', { state: 'open', failureCount: 3, lastFailureTime: Date.now() });
          await app.cacheSet('entry', { kept: true });
          await app.idempotencySet('operation', ['done'], 60_000, 'gs:');
          await app.saveCheckpoint({ id: `${stem}-cp`, taskId: `${stem}-task`, sequence: 1, timestamp: 0, progress: 1, data: { at: 1 } });
          const slots = [
            { slot: 'lock', source: legacy.locks },
            { slot: 'circuitBreaker', source: legacy.circuit },
            { slot: 'cache', source: legacy.cache },
            { slot: 'idempotency', source: legacy.idempotency },
            { slot: 'checkpoint', source: legacy.checkpoints },
          ] as const;
          await adoptGoGoScope(db, { keyPrefix: 'gs:', idempotencyKeyPrefix: 'gs:', slots: slots.map((slot) => ({ ...slot, target: target(slot.source) })) });
        })());
      const adoptAwaitlyCollection = () =>
        (awaitly ??= (async () => {
          // Empty apart from a key no case lists: the cases list every key of the collection.
          const collection = await awaitlyMongoCollection(db, kvName);
          await awaitlyMongoSet(collection, 'workflow:state:legacy', '{}');
          await collection.deleteOne({ _id: 'workflow:state:legacy' as never });
        })());
      return {
        kv: async () => {
          await adoptAwaitlyCollection();
          return whenReady(new MongoKeyValueStore({ ...base, collection: kvName }));
        },
        locks: async () => {
          await adoptGoGoScopeCollections();
          return whenReady(new MongoLockProvider({ ...base, collection: target(legacy.locks) }));
        },
        cache: async (options) => {
          await adoptGoGoScopeCollections();
          return whenReady(new MongoCacheProvider({ ...base, ...options, collection: target(legacy.cache) }));
        },
        circuitBreaker: async () => {
          await adoptGoGoScopeCollections();
          return whenReady(new MongoCircuitBreakerStore({ ...base, collection: target(legacy.circuit) }));
        },
        checkpoints: async (options) => {
          await adoptGoGoScopeCollections();
          return whenReady(new MongoCheckpointStore({ ...base, ...options, collection: target(legacy.checkpoints) }));
        },
        idempotency: async () => {
          await adoptGoGoScopeCollections();
          return whenReady(new MongoIdempotencyStore({ ...base, collection: target(legacy.idempotency) }));
        },
        cleanup: async () => {
          const names = [kvName, ...Object.values(legacy).flatMap((name) => [name, target(name)])];
          await Promise.all(names.map((name) => db.dropCollection(name).catch(() => false)));
        },
      };
    },
  };
}

describeEachServer(servers, 'conformance on adopted collections', (server) => {
  const adapter = adoptedAdapter(server);
  describeKeyValueStore(adapter);
  describeLockProvider(adapter);
  describeCacheProvider(adapter);
  describeCircuitBreakerStore(adapter);
  describeCheckpointStore(adapter);
  describeIdempotencyStore(adapter);
});
