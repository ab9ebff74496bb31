import type { JsonObject } from '@stowage/core';
import type { ConformanceAdapter } from '@stowage/core/conformance';
import { MongoClient } from 'mongodb';
import {
  MongoCacheProvider,
  MongoCheckpointStore,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  mongo,
  type MongoDialectOption,
} from '../src/index.js';

let contexts = 0;

/** A name no other test run uses: for databases and collection prefixes. */
export function uniqueName(stem: string): string {
  return `${stem}_${process.pid}_${Date.now().toString(36)}_${(contexts++).toString(36)}`;
}

export interface MongoTestServer {
  url: string;
  label: string;
  /** A client for setup and cleanup (dropping collections); the stores under test open their own. */
  admin: MongoClient;
  database: string;
}

/**
 * The Mongo adapter as the conformance suite sees it. Every context gets its own collection
 * names; every store opens its own client from the URL (like separate processes would), and
 * cleanup drops the context's collections.
 */
export function mongoAdapter(server: MongoTestServer, dialect: MongoDialectOption = 'auto'): ConformanceAdapter {
  return {
    name: `mongo ${dialect === 'auto' ? '' : `${dialect} dialect `}(${server.label})`,
    createContext() {
      const stem = uniqueName('c');
      const names = {
        kv: `${stem}_kv`,
        snapshots: `${stem}_snapshots`,
        workflowLocks: `${stem}_wflocks`,
        locks: `${stem}_locks`,
        cache: `${stem}_cache`,
        circuit: `${stem}_circuit`,
        checkpoints: `${stem}_checkpoints`,
        idempotency: `${stem}_idempotency`,
      };
      const base = { url: server.url, database: server.database, dialect };
      return {
        kv: () => new MongoKeyValueStore({ ...base, collection: names.kv }).connect(),
        snapshots: ({ lock }) =>
          (lock
            ? mongo<JsonObject>({ ...base, collection: names.snapshots, lock: { collection: names.workflowLocks } })
            : mongo<JsonObject>({ ...base, collection: names.snapshots })
          ).connect(),
        locks: () => new MongoLockProvider({ ...base, collection: names.locks }).connect(),
        cache: (options) => new MongoCacheProvider({ ...base, ...options, collection: names.cache }).connect(),
        circuitBreaker: () => new MongoCircuitBreakerStore({ ...base, collection: names.circuit }).connect(),
        checkpoints: () => new MongoCheckpointStore({ ...base, collection: names.checkpoints }).connect(),
        idempotency: () => new MongoIdempotencyStore({ ...base, collection: names.idempotency }).connect(),
        cleanup: async () => {
          const db = server.admin.db(server.database);
          await Promise.all(Object.values(names).map((name) => db.dropCollection(name).catch(() => false)));
        },
      };
    },
  };
}
