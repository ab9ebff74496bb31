import type { JsonObject } from '@stowage/core';
import type { ConformanceAdapter, ConformanceTransaction } from '@stowage/core/conformance';
import { MongoClient, ReadPreference, type MongoClientOptions, type ReadPreferenceMode } from 'mongodb';
import {
  MongoCacheProvider,
  MongoCheckpointStore,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  MongoProcessBackend,
  mongo,
  processIndexSpec,
  type MongoCollectionKind,
  type MongoDialectOption,
  type MongoStoreOptions,
} from '../src/index.js';

let contexts = 0;

/** `store` once ready (connected, collections created): for `const kv = await whenReady(new MongoKeyValueStore(…))`. */
export async function whenReady<T extends { ready(): Promise<void> }>(store: T): Promise<T> {
  await store.ready();
  return store;
}

/** A name no other test run uses: for databases and collection prefixes. */
export function uniqueName(stem: string): string {
  return `${stem}_${process.pid}_${Date.now().toString(36)}_${(contexts++).toString(36)}`;
}

/** Fresh collection names, one for each kind of collection the stores write (`processClaims`: the process backend's claims). */
export function storeNames(): Record<MongoCollectionKind, string> {
  const processCollection = uniqueName('process');
  return {
    kv: uniqueName('kv'),
    snapshots: uniqueName('snap'),
    workflowLocks: uniqueName('wf'),
    locks: uniqueName('locks'),
    cache: uniqueName('cache'),
    circuitBreaker: uniqueName('circuit'),
    checkpoints: uniqueName('cp'),
    idempotency: uniqueName('idem'),
    process: processCollection,
    processClaims: processIndexSpec(processCollection).claims.collection,
  };
}

/**
 * One store of every kind on `connection` (a url or client, the database, a dialect…), each
 * on its collection of `names`: the snapshot store with workflow locks and the prefix `p`, the
 * cache with the prefix `c`, so that their commands carry a prefix. Created, not started:
 * `ready()` starts them one after the other; `all` is the list of them.
 */
export function everyStore(connection: Omit<MongoStoreOptions, 'collection'>, names = storeNames()) {
  const on = (kind: MongoCollectionKind) => ({ ...connection, collection: names[kind] });
  const stores = {
    kv: new MongoKeyValueStore(on('kv')),
    snapshots: mongo<JsonObject>({ ...on('snapshots'), prefix: 'p', lock: { collection: names.workflowLocks } }),
    locks: new MongoLockProvider(on('locks')),
    cache: new MongoCacheProvider({ ...on('cache'), prefix: 'c' }),
    breaker: new MongoCircuitBreakerStore(on('circuitBreaker')),
    checkpoints: new MongoCheckpointStore(on('checkpoints')),
    idempotency: new MongoIdempotencyStore(on('idempotency')),
    backend: new MongoProcessBackend(on('process')),
  };
  const all = Object.values(stores);
  return {
    ...stores,
    names,
    all,
    async ready(): Promise<void> {
      for (const store of all) await store.ready();
    },
    async close(): Promise<void> {
      await Promise.all(all.map((store) => store.close()));
    },
  };
}

export interface MongoTestServer {
  url: string;
  label: string;
  /** A client for setup and cleanup (dropping collections); the stores under test open their own. */
  admin: MongoClient;
  database: string;
}

/** A run of the suite with other client options; with `sharedClient`, as an application that owns its client and its transactions. */
export interface MongoAdapterVariant {
  name: string;
  clientOptions: MongoClientOptions;
  /**
   * Every store of a context gets one client the context opens (the `client` option), and the
   * context begins transactions as a user would, a session of that client with a started
   * transaction (`beginTransaction`): a session is sent only with the client that started it.
   */
  sharedClient?: boolean;
  /** With `sharedClient`: the client's read preference, switched once it connected (see {@link switchReadPreference}). */
  readPreference?: ReadPreferenceMode;
}

/**
 * Switches a connected client's read preference: what the driver reads for new databases,
 * collections and transactions, as if it had come in the connection string
 * (`?readPreference=secondaryPreferred`). jongodb refuses the handshake of a client created so
 * ("single-node replica-set profile supports readPreference mode 'primary' only").
 */
export function switchReadPreference(client: MongoClient, mode: ReadPreferenceMode): void {
  (client.options as { readPreference: ReadPreference }).readPreference = ReadPreference.fromString(mode);
  if (client.db('any').readPreference.mode !== mode) throw new Error(`the driver did not take the read preference ${mode}`);
}

/**
 * The Mongo adapter as the conformance suite sees it. Every context gets its own collection
 * names; every store opens its own client from the URL (like separate processes would), or,
 * with `variant.sharedClient`, uses the context's client; cleanup drops the context's
 * collections.
 */
export function mongoAdapter(server: MongoTestServer, dialect: MongoDialectOption = 'auto', variant?: MongoAdapterVariant): ConformanceAdapter {
  return {
    name: `mongo ${dialect === 'auto' ? '' : `${dialect} dialect `}${variant ? `${variant.name} ` : ''}(${server.label})`,
    createContext() {
      const names = storeNames();
      const shared = variant?.sharedClient ? new MongoClient(server.url, variant.clientOptions) : undefined;
      const mode = variant?.readPreference;
      const connected = shared && mode ? shared.connect().then(() => switchReadPreference(shared, mode)) : Promise.resolve();
      /** `open` once the shared client has its read preference. */
      const after =
        <A extends unknown[], T>(open: (...args: A) => Promise<T>) =>
        (...args: A) =>
          connected.then(() => open(...args));
      const base = {
        database: server.database,
        dialect,
        ...(shared ? { client: shared } : { url: server.url, ...(variant && { clientOptions: variant.clientOptions }) }),
      };
      return {
        kv: after(() => whenReady(new MongoKeyValueStore({ ...base, collection: names.kv }))),
        snapshots: after(({ lock, prefix }) =>
          whenReady(
            lock
              ? mongo<JsonObject>({ ...base, prefix, collection: names.snapshots, lock: { collection: names.workflowLocks } })
              : mongo<JsonObject>({ ...base, prefix, collection: names.snapshots }),
          ),
        ),
        locks: after(() => whenReady(new MongoLockProvider({ ...base, collection: names.locks }))),
        cache: after((options) => whenReady(new MongoCacheProvider({ ...base, ...options, collection: names.cache }))),
        circuitBreaker: after(() => whenReady(new MongoCircuitBreakerStore({ ...base, collection: names.circuitBreaker }))),
        checkpoints: after((options) => whenReady(new MongoCheckpointStore({ ...base, ...options, collection: names.checkpoints }))),
        idempotency: after(() => whenReady(new MongoIdempotencyStore({ ...base, collection: names.idempotency }))),
        process: after(() => whenReady(new MongoProcessBackend({ ...base, collection: names.process }))),
        ...(shared && { beginTransaction: () => connected.then(() => beginTransaction(shared)) }),
        cleanup: async () => {
          const db = server.admin.db(server.database);
          await Promise.all(Object.values(names).map((name) => db.dropCollection(name).catch(() => false)));
          await connected.catch(() => undefined);
          await shared?.close();
        },
      };
    },
  };
}

/** As a user would: a session of their client with a started transaction, ended with the transaction. */
export function beginTransaction(client: MongoClient): ConformanceTransaction {
  const session = client.startSession();
  session.startTransaction();
  const end = (how: () => Promise<unknown>) => async () => {
    try {
      await how();
    } finally {
      await session.endSession();
    }
  };
  return { transaction: session, commit: end(() => session.commitTransaction()), rollback: end(() => session.abortTransaction()) };
}
