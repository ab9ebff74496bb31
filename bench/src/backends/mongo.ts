/**
 * The Mongo server: stowage on a bench-owned MongoClient, the raw `db.command` replay of the
 * commands it sends on a twin client, @keyv/mongo and awaitly-mongo. Command monitoring
 * costs time, so it is on only for the observed twins used to capture and count.
 */
import KeyvMongo from '@keyv/mongo';
import Keyv from 'keyv';
import type { MongoLockProvider } from '@stowage/mongo';
import { Collection, MongoClient, type CreateIndexesOptions, type IndexSpecification, type MongoClientOptions } from 'mongodb';
import { importAwaitlyMongo } from '../awaitly-shim.ts';
import { config } from '../config.ts';
import { ANCHOR_COLLECTIONS, fillAnchorCollections, keyvAnchorSeeder, mongoRawAndAnchors } from '../anchor-mongo.ts';
import { handoffSection } from '../handoff.ts';
import { OPEN_LOOP_ROUTES, openLoopSection } from '../open-loop/section.ts';
import { runHeapGrowth } from '../memory.ts';
import { MongoRecorder, type MongoCommand } from '../mongo-observer.ts';
import { buildOps, unavailableStowage, type StowageSet } from '../ops.ts';
import { awaitlyPeers, combinePeers, keyvPeers, type AwaitlyStore } from '../peers.ts';
import { mongoReplayer, stripDriverFields } from '../replay.ts';
import { failedTable } from '../sections.ts';
import type { BackendBench, Impl, Observation, OpBench, Section } from '../types.ts';
import { AnchorKeys, KV_VALUE } from '../workload.ts';
import { openStowageMongo } from './stowage-mongo.ts';

/**
 * A database of its own per run, dropped at the end: a database a failed run left behind (or
 * one a server bug wedged, see FERRETDB_UPDATE_LIMIT) never stands in the next run's way.
 */
export const BENCH_DATABASE = `stowage_bench_${process.pid}`;

/** The JSON text in `field` of the document a replayed `find` found, parsed (see `OpBench.returnsCallerValue`). */
function parseFoundValue(reply: unknown, field: string): unknown {
  const found = (reply as { cursor: { firstBatch: Record<string, unknown>[] } }).cursor.firstBatch[0];
  if (found === undefined) return null;
  // JSON text is parsed, as the caller gets an object; a document the adapter keeps as BSON is the object already
  return typeof found[field] === 'string' ? JSON.parse(found[field]) : found[field];
}

/**
 * FerretDB v1.24 (SQLite) never answers an `update` command of 100 or more upserts that match
 * existing documents, nor two concurrent multi-statement updates (50 each, different
 * documents), and that database then stays locked until FerretDB restarts. There the bench
 * runs setMany with 99 entries, one call at a time, and says so.
 */
const FERRETDB_UPDATE_LIMIT = 99;
/**
 * FerretDB v1 (SQLite) finds a document by `_id` in about 7 ms at 20,000 documents (it reads
 * far more than the one document), so its anchor collections are kept small.
 */
const FERRETDB_ANCHOR_ROWS = 1_000;

function shorten(value: unknown): unknown {
  if (typeof value === 'string') return value.length > 40 ? `${value.slice(0, 37)}...` : value;
  if (Array.isArray(value)) return value.length > 3 ? [...value.slice(0, 3).map(shorten), `…${value.length - 3} more`] : value.map(shorten);
  if (value instanceof Date) return `Date(${value.toISOString()})`;
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const entries = Object.entries(value);
    const shown = entries.slice(0, 8).map(([k, v]) => [k, shorten(v)]);
    if (entries.length > 8) shown.push(['…', `${entries.length - 8} more fields`]);
    return Object.fromEntries(shown);
  }
  return value;
}

function describe(command: MongoCommand): string {
  return `${command.name} ${JSON.stringify(shorten(stripDriverFields(command.command)))}`;
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * @keyv/mongo creates a TTL index when it connects and treats a refusal as fatal (its connect
 * promise never settles). Servers without TTL indexes (FerretDB v1) refuse it. While keyv
 * connects, that one refusal is ignored and noted; the commands keyv sends for get/set are
 * unchanged.
 */
function tolerateRefusedTtlIndexes(refused: string[]): () => void {
  const proto = Collection.prototype as unknown as {
    createIndex(this: Collection, spec: IndexSpecification, options?: CreateIndexesOptions): Promise<string>;
  };
  const original = proto.createIndex;
  proto.createIndex = async function createIndex(spec, options) {
    try {
      return await original.call(this, spec, options);
    } catch (error) {
      if (options?.expireAfterSeconds === undefined) throw error;
      refused.push((error as Error).message);
      return 'refused-ttl-index';
    }
  };
  return () => {
    proto.createIndex = original;
  };
}

export async function mongoBackend(url: string, label: string): Promise<BackendBench> {
  // a server that stops answering fails the run after 60 s instead of hanging it
  const options: MongoClientOptions = { maxPoolSize: config.poolSize, socketTimeoutMS: 60_000 };
  const connect = async (monitor: boolean) => new MongoClient(url, { ...options, monitorCommands: monitor }).connect();
  const recorder = new MongoRecorder();
  const clients: MongoClient[] = [];
  const client = async (monitor: boolean) => {
    const c = await connect(monitor);
    clients.push(c);
    if (monitor) recorder.attach(c);
    return c;
  };

  const admin = await client(false);
  const buildInfo = await admin.db('admin').command({ buildInfo: 1 });
  const ferretdb = 'ferretdbVersion' in buildInfo;
  const [stowageClient, observedClient, rawClient, awaitlyClient] = await Promise.all([client(false), client(true), client(false), client(false)]);

  const anchorRows = ferretdb ? Math.min(FERRETDB_ANCHOR_ROWS, config.anchorRows) : config.anchorRows;
  const anchorChunk = ferretdb ? 50 : 1000;
  let stowageError: string | null = null;
  let measured: Awaited<ReturnType<typeof openStowageMongo>> | null = null;
  let observed: Awaited<ReturnType<typeof openStowageMongo>> | null = null;
  /** The lock store's updates are atomic (its grants can be held to the raw driver's), and its grants are compare-and-sets (classic dialect). */
  let lockAtomic = true;
  let lockCompareAndSet = false;
  try {
    measured = await openStowageMongo(stowageClient, BENCH_DATABASE);
    observed = await openStowageMongo(observedClient, BENCH_DATABASE);
    await fillAnchorCollections(measured.anchor, anchorRows, anchorChunk);
    const locks = measured.set.locks as MongoLockProvider;
    await locks.ready();
    lockAtomic = locks.capabilities.atomicUpdates !== false;
    lockCompareAndSet = lockAtomic && locks.dialect === 'classic';
  } catch (error) {
    stowageError = (error as Error).message;
  }

  // @keyv/mongo makes its own client from the URL; the options it does not know go to it
  type KeyvMongoOptions = ConstructorParameters<typeof KeyvMongo>[0];
  const keyvOptions = { url, db: BENCH_DATABASE, collection: 'keyv', ...options };
  const notes: string[] = [];
  const refused: string[] = [];
  const restore = tolerateRefusedTtlIndexes(refused);
  let keyvClients;
  let keyvStore: KeyvMongo;
  let keyvObservedStore: KeyvMongo;
  try {
    keyvStore = new KeyvMongo(keyvOptions as KeyvMongoOptions);
    keyvObservedStore = new KeyvMongo({ ...keyvOptions, monitorCommands: true } as KeyvMongoOptions);
    for (const store of [keyvStore, keyvObservedStore]) store.on('error', () => undefined);
    keyvClients = await withTimeout(Promise.all([keyvStore.connect, keyvObservedStore.connect]), 15_000, '@keyv/mongo connect');
  } finally {
    restore();
  }
  if (refused.length > 0) {
    notes.push(`@keyv/mongo: the server refused its TTL index (${refused[0]}); ignored so that keyv could connect, its get/set commands are unchanged`);
  }
  recorder.attach(keyvClients[1].mongoClient);
  const keyv = new Keyv({ store: keyvStore, namespace: 'bench' });
  const keyvObserved = new Keyv({ store: keyvObservedStore, namespace: 'bench' });
  for (const k of [keyv, keyvObserved]) k.on('error', () => undefined);

  // awaitly-mongo bundles mongodb 7.5 for the client it makes itself; given ours it only calls
  // connect() and db() on it, so it runs on the same driver as everything else here
  const { mongo } = await importAwaitlyMongo();
  type AwaitlyClient = NonNullable<Parameters<typeof mongo>[0] extends infer O ? (O extends { client?: infer C } ? C : never) : never>;
  // its own collections: awaitly-mongo stores snapshots as BSON documents, stowage as JSON text
  const awaitlyOptions = { url, database: BENCH_DATABASE, collection: 'peer_awaitly_snapshots', lock: { lockCollectionName: 'peer_awaitly_locks' } };
  const awaitlyStore = mongo({ ...awaitlyOptions, client: awaitlyClient as unknown as AwaitlyClient }) as unknown as AwaitlyStore;
  const awaitlyObserved = mongo({ ...awaitlyOptions, client: observedClient as unknown as AwaitlyClient }) as unknown as AwaitlyStore;

  const unavailable = unavailableStowage(stowageError ?? 'stowage not loaded');
  if (ferretdb) {
    notes.push(
      `FerretDB: the anchor collections hold ${anchorRows.toLocaleString('en-US')} keys, not ${config.anchorRows.toLocaleString('en-US')}: FerretDB v1 (SQLite) takes ~7 ms per find by _id at 20,000 documents`,
    );
    notes.push(
      `FerretDB: kv.setMany runs with ${FERRETDB_UPDATE_LIMIT} entries, one call in flight: FerretDB v1 never answers an update of >= 100 upserts over existing documents, nor concurrent multi-statement updates (the database then stays locked until FerretDB restarts)`,
    );
  }
  if (!lockAtomic) {
    notes.push('lock.acquire+release: no target against the raw driver: updates are not atomic here, so stowage reads each grant back (3 commands), and the raw findAndModify is no lock');
  }
  if (lockCompareAndSet) {
    notes.push(
      "lock.acquire+release: the replay has no target: a grant is a compare-and-set on the fence the store last saw, and the replayed command carries the captured call's fence, so on other keys it matches nothing",
    );
  }
  const ops = buildOps(
    measured?.set ?? unavailable,
    observed?.set ?? unavailable,
    {
      keys: new AnchorKeys(anchorRows),
      measured: measured?.anchor ?? unavailable,
      variant: measured?.anchorVariant ?? unavailable,
      observed: observed?.anchor ?? unavailable,
      variantObserved: observed?.anchorVariant ?? unavailable,
    },
    combinePeers(
      // issue 27: stowage's acquire+release at least as fast as the obvious two commands, where updates are atomic
      mongoRawAndAnchors(rawClient, BENCH_DATABASE, lockAtomic ? 1 : null),
      // keyv looks documents up by a `key` field: on servers that scan for that (FerretDB) its
      // batch and delete calls take minutes, so only the targeted get/set run here
      keyvPeers('@keyv/mongo', keyv, keyvObserved, keyvAnchorSeeder(anchorRows, anchorChunk), true),
      awaitlyPeers('awaitly-mongo', awaitlyStore, awaitlyObserved),
    ),
    {
      ...(ferretdb && { setManyBatch: FERRETDB_UPDATE_LIMIT, setManyConcurrency: 1, setManyNote: 'FerretDB limits, see notes' }),
      lockReplayWithoutTarget: lockCompareAndSet,
      // documents in the layout MongoKeyValueStore documents (`{ _id: key, value, version, updatedAt }`),
      // inserted in one command: FerretDB takes ~50 ms per versioned upsert of stowage's setMany
      seedKeys: async (keys) => {
        const documents = keys.map((key) => ({ _id: key, value: KV_VALUE, version: 1, updatedAt: new Date() }));
        await admin.db(BENCH_DATABASE).collection<{ _id: string }>('workflow_state').insertMany(documents, { ordered: false });
      },
    },
  );
  const notApplicable = (id: Section['id'], title: string, reason: string): Section => ({
    id,
    run: async () => [{ id, title, header: ['what'], align: ['l'], rows: [{ cells: ['-'], note: `n/a: ${reason}` }], notes: [] }],
  });
  const sections: Section[] = [
    ferretdb
      ? notApplicable('flat', 'listings by table size', 'FerretDB v1 reads far more than an index range for a find by _id or an _id range (7 ms per find at 20,000 documents): it would measure FerretDB')
      : notApplicable('flat', 'listings by table size', 'measured on Postgres only so far'),
    {
      id: 'memory',
      run: async () => {
        try {
          return [await runHeapGrowth('mongo', measured?.set ?? unavailable)];
        } catch (error) {
          return [failedTable('heap', 'heap growth', error)];
        }
      },
    },
    handoffSection(() => ({ kind: 'mongo', url, database: BENCH_DATABASE, poolSize: config.poolSize }), { polling: false }),
    notApplicable('connections', 'connections', 'counted from pg_stat_activity: Postgres only'),
    openLoopSection({
      backend: 'mongo',
      id: 'mongo',
      url,
      namespace: BENCH_DATABASE,
      rows: anchorRows,
      impls: ['stowage', 'raw driver'],
      targets: false,
      // FerretDB v1 answers a find in milliseconds: its ladder stops far lower
      routes: OPEN_LOOP_ROUTES.map((route) => ({ ...route, rates: ferretdb ? [100, 250, 500, 1_000] : route.rates })),
    }),
  ];

  return {
    id: 'mongo',
    title: ferretdb ? 'Mongo server (FerretDB)' : 'Mongo server',
    label,
    driver: 'mongodb 7.9.0',
    ops,
    stowage: measured?.set ?? null,
    stowageError,
    notes,
    sections,
    async resetData() {
      const db = admin.db(BENCH_DATABASE);
      const kept = new Set<string>(Object.values(ANCHOR_COLLECTIONS));
      // jongodb has no listCollections ("no such command", code 59): there the operations run on what the ones before left.
      const listed = await db
        .listCollections({}, { nameOnly: true })
        .toArray()
        .catch((error: unknown) => {
          if ((error as { code?: unknown }).code === 59) return [];
          throw error;
        });
      for (const { name } of listed) {
        if (!name.startsWith('system.') && !kept.has(name)) await db.collection(name).deleteMany({});
      }
    },
    async observe(fn): Promise<Observation> {
      const { commands } = await recorder.record(fn);
      return { count: commands.length, descriptions: commands.map(describe), capture: commands };
    },
    rawFor(op: OpBench, observation: Observation): Impl {
      const replayer = mongoReplayer(rawClient, observation.capture as MongoCommand[]);
      const replay = (i: number) => replayer.run((j) => op.keys.key(i, j));
      const field = op.returnsCallerValue;
      const run = field === undefined ? replay : (i: number) => replay(i).then((reply) => parseFoundValue(reply, field));
      return { name: "replay of stowage's commands", kind: 'replay', keyParams: replayer.markers, run };
    },
    async close() {
      await measured?.close().catch(() => undefined);
      await observed?.close().catch(() => undefined);
      await admin
        .db(BENCH_DATABASE)
        .dropDatabase()
        .catch(() => undefined);
      await Promise.all(clients.map((c) => c.close()));
      await Promise.all([keyvStore.disconnect(), keyvObservedStore.disconnect()]).catch(() => undefined);
    },
  };
}

export type { StowageSet };
