import { createHash } from 'node:crypto';
import { findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresCircuitBreakerStore,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresProcessBackend,
  TableName,
  postgres,
  tableDdl,
  type PostgresPool,
  type PostgresPoolClient,
  type PostgresQueryResult,
  type PostgresStatement,
  type TableKind,
} from '../src/index.js';
import { processStatements } from '../src/process/statements.js';
import { cacheStatements } from '../src/stores/cache.js';
import { checkpointStatements } from '../src/stores/checkpoints.js';
import { circuitStatements } from '../src/stores/circuit-breaker.js';
import { idempotencyStatements } from '../src/stores/idempotency.js';
import { keyValueStatements } from '../src/stores/kv.js';
import { snapshotStatements } from '../src/stores/snapshots.js';
import { dropTables, tableSet } from './support/context.js';

/**
 * Query plans, not timings: every statement stowage sends, explained on tables of a million
 * rows each, must use an index wherever one applies (no `Seq Scan`), and the paged listings
 * must read in index order (no `Sort`), so that their cost does not grow with the table.
 *
 * The statements are the ones the stores really send (recorded from their calls through a
 * one-connection pool, with the calls' own parameters), and every statement of the statement
 * builders must be among them. Each is explained as the prepared statement stowage made of it
 * on that connection, three ways: with the plan cache forced to the generic plan (what a
 * prepared statement runs once PostgreSQL stops planning per call), forced to a custom plan
 * for the recorded parameters, and, for the listings, as the plan cache chooses after 20
 * whole-table patterns on the same connection.
 */
const server = await findPostgresServer();
const describeServer = server ? describe : describe.skip;
const url = server?.url ?? '';

const ROWS = 1_000_000;

/**
 * Statements whose sequential scan is the right plan, and why. Everything else must not
 * scan a table sequentially in any of the plans checked.
 */
const MAY_SCAN: Record<string, string> = {
  'kv.keys': 'a glob that starts with a wildcard (`*`, `*:draft`) reads every row of the table; scan() is the bounded way',
  'kv.entries': 'as kv.keys',
};

/** Statements with no `Sort` in their plans: listings come in index order (a page stops after its rows instead of sorting all candidates). */
const ORDERED = new Set([
  'kv.entriesPage',
  'kv.entriesPageInRange',
  // createPostgresPersistence's list: a table of workflow state is (nearly) all one prefix.
  'kv.recent',
  'kv.recentAfter',
  'cache.keysPage',
  'cache.keysPageInRange',
  'snapshots.list',
  'snapshots.listAfter',
  'process.listItems',
  'process.listItemsInState',
  'process.readLog',
  // The coalesced point reads: an index probe per key, put in request order by the store, not by a sort.
  'kv.getMany',
  'kv.existsMany',
  'cache.getMany',
]);

interface Sent {
  /** The builder's name of the statement (`kv.get`), or the call that sent it for statements of other modules. */
  label: string;
  text: string;
  values: unknown[] | undefined;
  /** The prepared statement's name on the connection (`undefined`: sent unnamed, planned for each call). */
  name: string | undefined;
}

/** A pool that records what goes through it while {@link record} runs. */
class RecordingPool implements PostgresPool {
  readonly #pool: pg.Pool;
  #recording: Sent[] | undefined;
  #label = '';

  constructor(pool: pg.Pool) {
    this.#pool = pool;
  }

  get options(): object {
    return (this.#pool as unknown as { options: object }).options;
  }

  async record(label: string, operation: () => Promise<unknown>): Promise<Sent[]> {
    this.#recording = [];
    this.#label = label;
    try {
      await operation();
      return this.#recording;
    } finally {
      this.#recording = undefined;
    }
  }

  query(statement: string | PostgresStatement, values?: unknown[]): Promise<PostgresQueryResult> {
    this.#note(statement, values);
    return this.#pool.query(statement as pg.QueryConfig, values) as Promise<PostgresQueryResult>;
  }

  async connect(): Promise<PostgresPoolClient> {
    const client = await this.#pool.connect();
    return {
      query: (statement: string | PostgresStatement, values?: unknown[]) => {
        this.#note(statement, values);
        return client.query(statement as pg.QueryConfig, values) as Promise<PostgresQueryResult>;
      },
      release: (error?: Error | boolean) => client.release(error),
      on: (event: 'error', listener: (error: Error) => void) => client.on(event, listener),
      removeListener: (event: 'error', listener: (error: Error) => void) => client.removeListener(event, listener),
    };
  }

  end(): Promise<void> {
    return this.#pool.end();
  }

  #note(statement: string | PostgresStatement, values: unknown[] | undefined): void {
    const sent = typeof statement === 'string' ? { text: statement, values, name: undefined } : { values: statement.values, ...statement };
    this.#recording?.push({ label: this.#label, text: sent.text, values: sent.values, name: sent.name });
  }
}

/** A SQL literal for a parameter value as pg would send it (EXPLAIN EXECUTE takes its arguments as SQL). */
function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) {
    const elements = value.map((element) => (element === null || element === undefined ? 'NULL' : `"${String(element).replace(/["\\]/g, '\\$&')}"`));
    return pg.escapeLiteral(`{${elements.join(',')}}`);
  }
  if (value instanceof Date) return pg.escapeLiteral(value.toISOString());
  return pg.escapeLiteral(String(value));
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodesOf(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodesOf)];
}

/** `Index Scan(t_pkey) > Sort > …`, for messages. */
function describePlan(plan: PlanNode): string {
  return nodesOf(plan)
    .map((node) => `${node['Node Type']}${node['Index Name'] ? `(${node['Index Name']})` : node['Relation Name'] ? `(${node['Relation Name']})` : ''}`)
    .join(' > ');
}

const md5 = (text: string) => createHash('md5').update(text).digest('hex');
const pad2 = (n: number) => String(n).padStart(2, '0');
/** The generated keys (see `DATA`), so that point operations name rows that exist. */
const kvKey = (i: number) => `g${pad2(i % 20)}:${md5(String(i))}`;
const snapshotId = (i: number) => `wf-${pad2(i % 20)}:${md5(String(i))}`;
/** Row `i` belongs to the cache `c${i % 100}:`. */
const cacheKey = (i: number) => `g${pad2(Math.floor(i / 100) % 20)}:${md5(String(i))}`;
const itemId = (i: number) => `item-${md5(String(i))}`;

/**
 * A million rows per table, generated inside the server (`$N` is the row count). The keys of
 * the tables that are listed are hashes, so their order has nothing to do with the order of
 * the rows on disk, as in a table filled over time; the tables read only by key get keys in
 * row order, which loads three times faster. A few rows are expired, as in a table that is
 * cleaned regularly.
 */
const DATA: Record<TableKind, (table: string) => string> = {
  kv: (t) => `INSERT INTO ${t} (key, value, version, updated_at, expires_at)
    SELECT 'g' || lpad((i % 20)::text, 2, '0') || ':' || md5(i::text), 'value ' || i, i, date_trunc('milliseconds', now()),
      CASE WHEN i % 10 = 0 THEN now() + interval '1 day' WHEN i % 500 = 1 THEN now() - interval '1 day' END
    FROM generate_series(1, $N) AS i`,
  snapshots: (t) => `INSERT INTO ${t} (prefix, id, snapshot, version, updated_at)
    SELECT CASE WHEN i % 4 = 0 THEN 'tenant:' ELSE '' END, 'wf-' || lpad((i % 20)::text, 2, '0') || ':' || md5(i::text),
      '{"formatVersion":1}', i, date_trunc('milliseconds', now()) - ((i::bigint * 7919) % 2592000000) * interval '1 millisecond'
    FROM generate_series(1, $N) AS i`,
  // A hundred caches share the table.
  cache: (t) => `INSERT INTO ${t} (prefix, key, value, updated_at, expires_at)
    SELECT 'c' || (i % 100) || ':', 'g' || lpad(((i / 100) % 20)::text, 2, '0') || ':' || md5(i::text), '1', now(),
      CASE WHEN (i / 100) % 10 = 0 THEN now() + interval '1 day' WHEN (i / 100) % 500 = 1 THEN now() - interval '1 day' END
    FROM generate_series(1, $N) AS i`,
  checkpoints: (t) => `INSERT INTO ${t} (id, task_id, sequence, "timestamp", progress, data)
    SELECT 'cp-' || lpad(i::text, 7, '0'), 'task-' || lpad((i / 10)::text, 6, '0'), i % 10, now(), 0.5, '{}'
    FROM generate_series(1, $N) AS i`,
  idempotency: (t) => `INSERT INTO ${t} (key, status, token, value, updated_at, expires_at)
    SELECT 'op-' || lpad(i::text, 7, '0'), CASE WHEN i % 50 = 0 THEN 'in-flight' ELSE 'completed' END,
      CASE WHEN i % 50 = 0 THEN 'token' END, '1', now(),
      CASE WHEN i % 500 = 1 THEN now() - interval '1 day' ELSE now() + interval '1 day' END
    FROM generate_series(1, $N) AS i`,
  circuitBreaker: (t) => `INSERT INTO ${t} (key, state, failure_count)
    SELECT 'svc-' || lpad(i::text, 7, '0'), 'closed', 0 FROM generate_series(1, $N) AS i`,
  locks: (t) => DATA.workflowLocks(t),
  workflowLocks: (t) => `INSERT INTO ${t} (key, owner, fence, acquired_at, expires_at)
    SELECT 'lock-' || lpad(i::text, 7, '0'), 'owner', i, now(),
      CASE WHEN i % 500 = 1 THEN now() - interval '1 day' WHEN i % 500 = 2 THEN '-infinity' ELSE now() + interval '1 hour' END
    FROM generate_series(1, $N) AS i`,
  // Five processes; most items are done, a few hundred wait in each active state.
  processItems: (t) => `INSERT INTO ${t} (process, id, state, data, lease_owner, lease_until, created_at, updated_at)
    SELECT 'p' || (i % 5), 'item-' || md5(i::text), coalesce((ARRAY['a', 'b', 'c'])[(i / 5) % 100 + 1], 'done'), '{}',
      CASE WHEN i % 7 = 0 THEN 'worker' END,
      CASE WHEN i % 49 = 0 THEN now() - interval '1 hour' WHEN i % 7 = 0 THEN now() + interval '1 hour' END,
      now() - interval '1 hour', now() - interval '1 hour'
    FROM generate_series(1, $N) AS i`,
  processTransitions: (t) => `INSERT INTO ${t} (process, item_id, from_state, to_state, version, kind)
    SELECT 'p' || (i % 5), 'item-' || md5((i / 4)::text), NULL, (ARRAY['a', 'b', 'c', 'done'])[i % 4 + 1], i % 4 + 1, 'advance'
    FROM generate_series(1, $N) AS i`,
};

describeServer(`query plans on tables of ${ROWS.toLocaleString('en')} rows`, () => {
  const tables = tableSet();
  const name = (kind: TableKind) => new TableName(tables[kind]);
  let admin: pg.Pool;
  /** The one connection every store of the check and every EXPLAIN uses: prepared statements live per connection. */
  let connection: pg.Pool;
  let recording: RecordingPool;
  /** Builder statement texts, by text: `kv.get`, … */
  const labels = new Map<string, string>();

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: url, max: 2, application_name: 'stowage-plans-admin' });
    const started = performance.now();
    // Table and constraints first, the data, then the other indexes (built once, not row by
    // row); unlogged, since nothing here needs to survive a crash. Two tables at a time.
    const queue = Object.keys(DATA) as TableKind[];
    const load = async () => {
      for (let kind = queue.shift(); kind !== undefined; kind = queue.shift()) {
        const ddl = tableDdl(kind, name(kind));
        const table = name(kind).sql;
        const client = await admin.connect();
        try {
          for (const statement of ddl.filter((text) => !text.startsWith('CREATE INDEX'))) await client.query(statement);
          await client.query(`ALTER TABLE ${table} SET UNLOGGED`);
          await client.query(DATA[kind](table).replaceAll('$N', String(ROWS)));
          for (const statement of ddl.filter((text) => text.startsWith('CREATE INDEX'))) await client.query(statement);
          for (const sequence of ddl.filter((text) => text.startsWith('CREATE SEQUENCE'))) {
            const sequenceName = /CREATE SEQUENCE IF NOT EXISTS (\S+)/.exec(sequence)![1]!;
            await client.query(`SELECT setval(${pg.escapeLiteral(sequenceName)}, ${ROWS})`);
          }
          await client.query(`ANALYZE ${table}`);
        } finally {
          client.release();
        }
      }
    };
    await Promise.all([load(), load()]);
    console.log(`[stowage plans] ${Object.keys(DATA).length} tables of ${ROWS} rows built in ${Math.round(performance.now() - started)} ms`);

    connection = new pg.Pool({ connectionString: url, max: 1, application_name: 'stowage-plans' });
    recording = new RecordingPool(connection);
    const builders: Record<string, Record<string, string>> = {
      kv: keyValueStatements(name('kv')),
      snapshots: snapshotStatements(name('snapshots')),
      cache: cacheStatements(name('cache').sql),
      checkpoints: checkpointStatements(name('checkpoints').sql),
      idempotency: idempotencyStatements(name('idempotency').sql),
      circuitBreaker: circuitStatements(name('circuitBreaker').sql),
      process: processStatements(name('processItems').sql, name('processTransitions').sql),
    };
    for (const [store, statements] of Object.entries(builders)) {
      for (const [statement, text] of Object.entries(statements)) labels.set(text, `${store}.${statement}`);
    }
  }, 600_000);

  afterAll(async () => {
    await connection?.end();
    if (admin) {
      await dropTables(admin, tables);
      await admin.end();
    }
    await server?.stop();
  });

  /**
   * The plan of `sent` on the recording connection, with the plan cache in `mode`. A statement
   * sent unnamed with parameters is planned for each call: its plan is the custom one, whatever
   * `mode` says.
   */
  async function explain(sent: Sent, mode: 'force_generic_plan' | 'force_custom_plan' | 'auto'): Promise<PlanNode> {
    const client = await connection.connect();
    const values = (sent.values ?? []).map(literal).join(', ');
    const unnamed = sent.name === undefined && sent.values !== undefined;
    try {
      await client.query(`SET plan_cache_mode = ${unnamed ? 'force_custom_plan' : mode}`);
      if (unnamed) await client.query(`PREPARE stowage_explained AS ${sent.text}`);
      const text =
        sent.name === undefined
          ? `EXPLAIN (FORMAT JSON) ${unnamed ? `EXECUTE stowage_explained(${values})` : sent.text}`
          : `EXPLAIN (FORMAT JSON) EXECUTE ${sent.name}(${values})`;
      const { rows } = await client.query(text);
      return (rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
    } finally {
      if (unnamed) await client.query('DEALLOCATE stowage_explained');
      await client.query('RESET plan_cache_mode');
      client.release();
    }
  }

  /** What is wrong with `plan` for the statement `label` (empty: nothing). */
  function problems(label: string, plan: PlanNode): string[] {
    const found: string[] = [];
    const nodes = nodesOf(plan);
    if (!(label in MAY_SCAN) && nodes.some((node) => node['Node Type'] === 'Seq Scan')) found.push('a Seq Scan');
    if (ORDERED.has(label) && nodes.some((node) => node['Node Type'] === 'Sort' || node['Node Type'] === 'Incremental Sort')) found.push('a Sort');
    return found;
  }

  test('every statement uses its index, as a generic and as a custom plan', { timeout: 600_000 }, async () => {
    // No background sweeper: only the calls below send statements (they call its jobs themselves).
    const common = { pool: recording, autoCreate: true, cleanupInterval: false as const };
    const kv = new PostgresKeyValueStore({ ...common, table: tables.kv });
    const snapshots = postgres({
      ...common,
      table: tables.snapshots,
      lock: { lockTableName: tables.workflowLocks },
      snapshotRetention: { finishedAfter: 29 * 86_400_000 },
    });
    const cache = new PostgresCacheProvider({ ...common, table: tables.cache, prefix: 'c3:' });
    const checkpoints = new PostgresCheckpointStore({ ...common, table: tables.checkpoints });
    const idempotency = new PostgresIdempotencyStore({ ...common, table: tables.idempotency });
    const breaker = new PostgresCircuitBreakerStore({ ...common, table: tables.circuitBreaker });
    const locks = new PostgresLockProvider({ ...common, table: tables.locks, wakeups: false });
    const backend = new PostgresProcessBackend({
      ...common,
      itemsTable: tables.processItems,
      transitionsTable: tables.processTransitions,
      wakeups: false,
      historyRetention: 7 * 86_400_000,
    });
    const stores = [kv, snapshots, cache, checkpoints, idempotency, breaker, locks, backend];
    await Promise.all(stores.map((store) => store.ready()));

    // Representative calls, each with parameters of a real workload: keys that exist, prefixes
    // that select a small part of the table, pages after a cursor in the middle.
    const calls: [label: string, call: () => Promise<unknown>][] = [
      ['kv.get', () => kv.get(kvKey(7))],
      ['kv.get (coalesced)', () => Promise.all([7, 8, 9].map((i) => kv.get(kvKey(i))))],
      ['kv.exists', () => kv.exists(kvKey(7))],
      ['kv.exists (coalesced)', () => Promise.all([7, 8].map((i) => kv.exists(kvKey(i))))],
      ['kv.set', () => kv.set(kvKey(11), 'v', { ttl: 60_000 })],
      ['kv.set (coalesced)', () => Promise.all([12, 13].map((i) => kv.set(kvKey(i), 'v')))],
      ['kv.delete', () => kv.delete(kvKey(14))],
      ['kv.delete (coalesced)', () => Promise.all([15, 16].map((i) => kv.delete(kvKey(i))))],
      ['kv.setMany', () => kv.setMany([{ key: kvKey(19), value: 'v' }, { key: kvKey(20), value: 'v' }])],
      ['kv.deleteMany', () => kv.deleteMany([kvKey(17), kvKey(18)])],
      ['kv.getEntry', () => kv.getEntry(kvKey(7))],
      ['kv.recent', async () => {
        // Every key starts with "g", as every key of a workflow-state table starts with its prefix.
        const page = await kv.recentEntries({ prefix: 'g', limit: 10 });
        await kv.recentEntries({ prefix: 'g', limit: 10, after: page.at(-1)! });
      }],
      ['kv.keys', () => kv.keys('*:ab\u0001')],
      ['kv.keys (prefix)', () => kv.keys('g07:ab*')],
      ['kv.entries', () => kv.entries('*:ab\u0001')],
      ['kv.entries (prefix)', () => kv.entries('g07:ab*')],
      ['kv.scanEntries', () => firstPages(kv.scanEntries('*', { pageSize: 100 }), 150)],
      ['kv.scanEntries (prefix)', () => firstPages(kv.scanEntries('g07:*', { pageSize: 100 }), 150)],
      ['kv.compareAndSet', async () => kv.compareAndSet(`new:${kvKey(19)}`, 'w', await kv.compareAndSet(`new:${kvKey(19)}`, 'v', null))],
      ['kv.clearExpired', () => kv.clearExpired()],

      ['snapshots.save', () => snapshots.save(snapshotId(21), { formatVersion: 1 } as never)],
      ['snapshots.save (expectedVersion)', async () => snapshots.save(snapshotId(21), { formatVersion: 1 } as never, { expectedVersion: (await snapshots.loadVersioned(snapshotId(21)))!.version })],
      ['snapshots.save (new)', () => snapshots.save(`new:${snapshotId(22)}`, { formatVersion: 1 } as never, { expectedVersion: null })],
      ['snapshots.delete', () => snapshots.delete(snapshotId(23))],
      ['snapshots.listPage', () => pages(snapshots, {}, 3)],
      ['snapshots.listPage (prefix)', () => pages(snapshots, { prefix: 'wf-07:a' }, 3)],
      ['workflowLock', async () => {
        const lease = await snapshots.tryAcquire('wf', { ttlMs: 60_000 });
        await snapshots.renew('wf', lease!.ownerToken, { ttlMs: 60_000 });
        await snapshots.release('wf', lease!.ownerToken);
        await snapshots.clearExpiredLocks();
      }],
      ['snapshots.clearFinished', () => snapshots.clearFinished()],

      ['cache.get', () => cache.get(cacheKey(3))],
      ['cache.get (coalesced)', () => Promise.all([103, 203].map((i) => cache.get(cacheKey(i))))],
      ['cache.set', () => cache.set(cacheKey(303), 1, 60_000)],
      ['cache.set (coalesced)', () => Promise.all([403, 503].map((i) => cache.set(cacheKey(i), 1)))],
      ['cache.has', () => cache.has(cacheKey(3))],
      ['cache.delete', () => cache.delete(cacheKey(603))],
      ['cache.keys', () => cache.keys('*:ab\u0001')],
      ['cache.keys (prefix)', () => cache.keys('g07:ab*')],
      ['cache.scan', () => firstPages(cache.scan('*', { pageSize: 100 }), 150)],
      ['cache.scan (prefix)', () => firstPages(cache.scan('g07:*', { pageSize: 100 }), 150)],
      ['cache.clearExpired', () => cache.clearExpired()],
      ['cache.clear', async () => {
        const other = new PostgresCacheProvider({ ...common, table: tables.cache, prefix: 'c9:' });
        await other.clear();
        await other.close();
      }],

      ['checkpoints', async () => {
        await checkpoints.save({ id: 'cp-new', taskId: 'task-000007', sequence: 100, timestamp: 1, progress: 0.5, data: {} });
        await checkpoints.load('cp-new');
        await checkpoints.loadLatest('task-000007');
        await checkpoints.list('task-000007');
        await checkpoints.cleanup('task-000007', 3);
        await checkpoints.deleteAll('task-000008');
        // go-go-scope's re-save (onDuplicate: 'replace').
        const replacing = new PostgresCheckpointStore({ ...common, table: tables.checkpoints, onDuplicate: 'replace' });
        await replacing.save({ id: 'cp-new', taskId: 'task-000007', sequence: 100, timestamp: 2, progress: 0.6, data: {} });
        await replacing.close();
      }],
      ['idempotency', async () => {
        const claim = await idempotency.reserve('op-new', 60_000);
        if (claim.status === 'acquired') await idempotency.complete('op-new', claim.token, { ok: true });
        await idempotency.get('op-new');
        await idempotency.set('op-new-2', 1, 60_000);
        await idempotency.fail('op-new-2', 'nobody');
        await idempotency.delete('op-new');
        await idempotency.clearExpired();
        // runOnce claims the key (advisory lock, and the result if completed) in its transaction
        await idempotency.runOnce!('op-run', async () => 'done', { ttl: 60_000 });
      }],
      ['circuitBreaker', async () => {
        await breaker.recordFailure('svc-new', 3, { cooldown: 1000 });
        await breaker.getState('svc-new');
        await breaker.setState('svc-new', { state: 'closed', failureCount: 0 });
        await breaker.recordSuccess('svc-new');
        await breaker.delete('svc-new');
      }],
      ['locks', async () => {
        const handle = await locks.acquire('lock-0000001', 60_000, 'me'); // an expired lease: granted
        expect(handle, 'the expired lease lock-0000001 is granted').not.toBeNull();
        await handle?.extend(60_000);
        await handle?.isValid();
        await handle?.release();
        await locks.forceRelease('lock-0000008');
        await locks.clearExpired();
      }],

      ['process', async () => {
        const { item } = await backend.createItem({ process: 'p1', id: 'new-item', state: 'a', data: {} });
        await backend.getItem('p1', itemId(1));
        await backend.listItems({ process: 'p1', limit: 100, after: itemId(1) });
        await backend.listItems({ process: 'p1', state: 'b', limit: 100, after: itemId(1) });
        await backend.history('p1', itemId(1));
        const feed = await backend.openFeed('p1', 'b', null);
        await feed.read({ limit: 100, wait: 0 });
        await feed.close();
        await backend.findClaimable({ process: 'p1', state: 'a', includeUnclaimed: true, limit: 100 });
        await backend.findClaimable({ process: 'p1', state: 'a', includeUnclaimed: false, unclaimedFor: 30_000, limit: 100 });
        const claimed = await backend.claim({ process: 'p1', itemId: item.id, state: 'a', version: item.version, owner: 'me', lease: 60_000 });
        await backend.extendLease({ process: 'p1', itemId: item.id, version: item.version, owner: 'me', lease: 60_000 });
        await backend.release({ process: 'p1', itemId: item.id, version: item.version, owner: 'me', delay: 0, refundAttempt: true });
        await backend.transition({ process: 'p1', itemId: item.id, from: 'a', version: claimed!.version, to: 'b', kind: 'advance', key: 'k' });
        await backend.clearHistory();
      }],
    ];

    const sent = new Map<string, Sent>();
    for (const [label, call] of calls) {
      for (const statement of await recording.record(label, call)) {
        if (statement.text.includes('pg_advisory_xact_lock')) continue; // the schema, once
        if (/^(BEGIN|COMMIT|ROLLBACK)\b/i.test(statement.text.trim())) continue; // runOnce's transaction
        sent.set(statement.text, { ...statement, label: labels.get(statement.text) ?? `${label}: ${statement.text.slice(0, 40).replace(/\s+/g, ' ')}` });
      }
    }
    const unsent = [...labels].filter(([text]) => !sent.has(text)).map(([, label]) => label);
    expect(unsent, 'every statement of the builders is sent by one of the calls above').toEqual([]);

    const report: string[] = [];
    const failures: string[] = [];
    for (const statement of sent.values()) {
      for (const mode of ['force_generic_plan', 'force_custom_plan'] as const) {
        const plan = await explain(statement, mode);
        const wrong = problems(statement.label, plan);
        if (wrong.length > 0) failures.push(`${statement.label} [${mode}]: ${wrong.join(', ')} in ${describePlan(plan)}`);
        if (mode === 'force_generic_plan') report.push(`${statement.label}: ${describePlan(plan)}`);
      }
    }
    console.log(`[stowage plans] generic plans:\n  ${report.join('\n  ')}`);
    for (const [label, reason] of Object.entries(MAY_SCAN)) console.log(`[stowage plans] ${label} may scan the table: ${reason}`);
    expect(failures).toEqual([]);
    await Promise.all(stores.map((store) => store.close()));
  });

  test('pages of workflow state read the index whatever the table holds: the recent listing is planned for each call', { timeout: 120_000 }, async () => {
    // 300,000 rows under one prefix, written in bursts that share a millisecond: on this table a
    // generic plan of the listing reads the primary key's whole range and sorts it.
    const extra = tableSet();
    const kv = new PostgresKeyValueStore({ pool: recording, table: extra.kv, cleanupInterval: false });
    try {
      await kv.ready();
      await admin.query(`INSERT INTO ${extra.kv} (key, value, version, updated_at)
        SELECT 'wf:' || lpad(i::text, 7, '0'), '{}', i, date_trunc('milliseconds', now()) - (i / 10000) * interval '1 millisecond'
        FROM generate_series(1, 300000) AS i`);
      await admin.query(`ANALYZE ${extra.kv}`);
      const sent = await recording.record('kv.recent', () => recentPages(kv, 'wf:', 3));
      expect(sent).toHaveLength(3);
      for (const statement of sent) {
        // As the server runs it: a named statement on its generic plan once it settled on one.
        const plan = await explain({ ...statement, label: 'kv.recent' }, 'force_generic_plan');
        expect(problems('kv.recent', plan), describePlan(plan)).toEqual([]);
      }
    } finally {
      await kv.close();
      await dropTables(admin, extra);
    }
  });

  test('after 20 whole-table patterns on one connection, a prefix pattern still reads its index range', { timeout: 600_000 }, async () => {
    const kv = new PostgresKeyValueStore({ pool: recording, table: tables.kv });
    const cache = new PostgresCacheProvider({ pool: recording, table: tables.cache, prefix: 'c3:' });
    const snapshots = postgres({ pool: recording, table: tables.snapshots });
    const backend = new PostgresProcessBackend({ pool: recording, itemsTable: tables.processItems, transitionsTable: tables.processTransitions, wakeups: false });
    // Whole-table patterns: the key range of `g*` holds every row (no row matches the rest,
    // so the warm-up reads the table without handing a million keys to JavaScript).
    const warmUps: [label: string, warm: () => Promise<unknown>, probe: () => Promise<unknown>][] = [
      ['kv.keys', () => kv.keys('g*\u0001'), () => kv.keys('g07:ab*')],
      ['kv.scanEntries', () => firstPages(kv.scanEntries('g*', { pageSize: 1000 }), 1), () => firstPages(kv.scanEntries('g07:ab*', { pageSize: 10 }), 15)],
      ['cache.keys', () => cache.keys('g*\u0001'), () => cache.keys('g07:ab*')],
      ['cache.scan', () => firstPages(cache.scan('g*', { pageSize: 1000 }), 1), () => firstPages(cache.scan('g07:ab*', { pageSize: 10 }), 15)],
      ['snapshots.list', () => snapshots.list({ prefix: 'wf-', limit: 1000 }), () => pages(snapshots, { prefix: 'wf-07:ab' }, 2)],
      ['process.listItems', () => backend.listItems({ process: 'p1', state: 'done', limit: 1000 }), () => backend.listItems({ process: 'p1', state: 'b', limit: 10, after: itemId(1) })],
    ];
    const failures: string[] = [];
    for (const [label, warm, probe] of warmUps) {
      for (let i = 0; i < 20; i++) await warm();
      for (const statement of await recording.record(label, probe)) {
        const statementLabel = labels.get(statement.text) ?? label;
        const plan = await explain({ ...statement, label: statementLabel }, 'auto');
        // Every probe here has a narrow pattern: none may scan the table, whatever MAY_SCAN says.
        const wrong = problems('', plan);
        if (ORDERED.has(statementLabel)) wrong.push(...problems(statementLabel, plan).filter((problem) => problem === 'a Sort'));
        if (wrong.length > 0) failures.push(`${statementLabel} after warm-up: ${wrong.join(', ')} in ${describePlan(plan)}`);
      }
    }
    const { rows } = await connection.query(`SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE name LIKE 'stowage\\_%'`);
    // The statements the warm-up ran many times (the others ran once or twice in the first test).
    const cached = rows
      .filter((row: { statement: string; generic_plans: string; custom_plans: string }) => labels.has(row.statement) && Number(row.generic_plans) + Number(row.custom_plans) > 5)
      .map((row: { statement: string; generic_plans: string; custom_plans: string }) => `${labels.get(row.statement)}: ${row.generic_plans} generic, ${row.custom_plans} custom`);
    console.log(`[stowage plans] plan cache after the warm-up:\n  ${cached.sort().join('\n  ')}`);
    expect(failures).toEqual([]);
    await Promise.all([kv.close(), cache.close(), snapshots.close(), backend.close()]);
  });
});

/** `count` pages of `kv.recentEntries` under `prefix`, each after the last entry of the one before. */
async function recentPages(kv: PostgresKeyValueStore, prefix: string, count: number): Promise<void> {
  let after: { updatedAt: Date; key: string } | undefined;
  for (let page = 0; page < count; page++) {
    const entries = await kv.recentEntries({ prefix, limit: 10, ...(after && { after }) });
    after = entries.at(-1);
  }
}

/** Reads `count` items of a scan (so that it fetches a page after a cursor), then stops it. */
async function firstPages<T>(scan: AsyncIterable<T>, count: number): Promise<void> {
  let seen = 0;
  for await (const item of scan) {
    void item;
    if (++seen >= count) return;
  }
}

/** Lists `count` pages (the later ones after a cursor). */
async function pages(store: { listPage(options: { prefix?: string; limit: number; cursor?: string }): Promise<{ nextCursor: string | null }> }, options: { prefix?: string }, count: number): Promise<void> {
  let cursor: string | undefined;
  for (let i = 0; i < count; i++) {
    const page = await store.listPage({ ...options, limit: 10, cursor });
    if (page.nextCursor === null) return;
    cursor = page.nextCursor;
  }
}
