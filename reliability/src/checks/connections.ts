/**
 * Connections. One process opens every store (key-value, snapshots with their lock, locks,
 * cache, circuit breaker, checkpoints, idempotency, process backend) from one URL and runs a
 * mixed workload with more calls at once than the pool has connections, a lock acquisition
 * waiting for a release among them. Then `processes` child processes do the same at once, each
 * through `connect()`, on the server's 100 connections.
 *
 * Proves: the process never has more than the pool's `max` plus one (LISTEN) connections on
 * the server — counted in `pg_stat_activity` by application name, a detector shown to see the
 * connections of eight separate pools — and the child processes get through their workload
 * with no failed call.
 */
import pg from 'pg';
import {
  connect,
  createPostgresProcessBackend,
  postgres,
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresCircuitBreakerStore,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  type PostgresProcessBackend,
  type PostgresStoreOptions,
} from '@stowage/postgres';
import type { Budget } from '../config.ts';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { APPLICATION_NAME, withClient } from '../backends/pg-admin.ts';
import { formatMs, sleep } from '../util.ts';
import { runWorkers, type Role } from '../workers.ts';

interface Stores {
  kv: PostgresKeyValueStore;
  snapshots: ReturnType<typeof postgres>;
  locks: PostgresLockProvider;
  cache: PostgresCacheProvider;
  breakers: PostgresCircuitBreakerStore;
  checkpoints: PostgresCheckpointStore;
  idempotency: PostgresIdempotencyStore;
  processes: PostgresProcessBackend;
  close(): Promise<void>;
}

/** Every store built directly from the same settings (which the README promises share one pool). */
function storesFromOneUrl(settings: PostgresStoreOptions): Stores {
  const stores = {
    kv: new PostgresKeyValueStore(settings),
    snapshots: postgres({ ...settings, lock: true }),
    locks: new PostgresLockProvider(settings),
    cache: new PostgresCacheProvider({ ...settings, prefix: 'connections:' }),
    breakers: new PostgresCircuitBreakerStore(settings),
    checkpoints: new PostgresCheckpointStore(settings),
    idempotency: new PostgresIdempotencyStore(settings),
    processes: createPostgresProcessBackend(settings),
  };
  return { ...stores, close: async () => void (await Promise.all(Object.values(stores).map((store) => store.close()))) };
}

/** Every store from one `connect()`. */
function storesFromConnect(settings: PostgresStoreOptions): Stores {
  const db = connect(settings);
  return {
    kv: db.kv(),
    snapshots: db.snapshots({ lock: true }),
    locks: db.locks(),
    cache: db.cache({ prefix: 'connections:' }),
    breakers: db.circuitBreaker(),
    checkpoints: db.checkpoints(),
    idempotency: db.idempotency(),
    processes: db.process(),
    close: () => db.close(),
  };
}

/**
 * `calls` calls in waves of 16 at once, over every store. Point calls of a tick would coalesce
 * into one statement, so most kinds here are ones that do not (saves, acquisitions, counters).
 * Each wave also has a lock acquisition that waits for a release (the LISTEN connection).
 */
async function mixedWorkload(stores: Stores, calls: number, tag: string): Promise<{ calls: number; failed: string[] }> {
  const failed: string[] = [];
  let made = 0;
  const attempt = async (what: string, fn: () => Promise<unknown>) => {
    made += 1;
    try {
      await fn();
    } catch (error) {
      failed.push(`${what}: ${describeError(error)}`);
    }
  };
  for (let wave = 0; made < calls; wave++) {
    const lockKey = `connections/${tag}/${wave}`;
    const held = await stores.locks.acquire(lockKey, 30_000).catch((error: unknown) => void failed.push(`locks.acquire: ${describeError(error)}`));
    const batch: Promise<unknown>[] = [
      attempt('locks.acquire (waiting)', async () => (await stores.locks.acquire(lockKey, 30_000, { wait: 30_000 }))?.release()),
    ];
    for (let i = 0; i < 15; i++) {
      const id = `${tag}/${wave}/${i}`;
      switch (i % 8) {
        case 0:
          batch.push(attempt('kv.set', () => stores.kv.set(id, 'v')));
          break;
        case 1:
          batch.push(attempt('snapshots.save', () => stores.snapshots.save(id, { formatVersion: 1 } as never)));
          break;
        case 2:
          batch.push(attempt('locks.acquire', async () => (await stores.locks.acquire(`${id}/lock`, 10_000))?.release()));
          break;
        case 3:
          batch.push(attempt('cache.set', () => stores.cache.set(id, { i })));
          break;
        case 4:
          batch.push(attempt('circuitBreaker.recordFailure', () => stores.breakers.recordFailure(`${tag}/api`, 1000)));
          break;
        case 5:
          batch.push(attempt('checkpoints.save', () => stores.checkpoints.save({ id, taskId: `${tag}/task`, sequence: wave * 100 + i, timestamp: 0, progress: 0, data: null })));
          break;
        case 6:
          batch.push(attempt('idempotency.reserve', () => stores.idempotency.reserve(id, 60_000)));
          break;
        default:
          batch.push(attempt('process.createItem', () => stores.processes.createItem({ process: 'connections', id, state: 'new', data: {} })));
      }
    }
    await sleep(5);
    await attempt('lock release', async () => held?.release());
    await Promise.all(batch);
  }
  return { calls: made, failed };
}

export interface ClientParams {
  url: string;
  schema: string;
  poolMax: number;
  calls: number;
  applicationName: string;
}

/** A child process: every store from one connect(), the mixed workload, then close. */
export const connectionsClient: Role<ClientParams, { calls: number; failed: string[] }> = async (_backend, params, context) => {
  const stores = storesFromConnect({ url: params.url, schema: params.schema, applicationName: params.applicationName, pool: { max: params.poolMax } });
  try {
    return await mixedWorkload(stores, params.calls, `child-${context.index}`);
  } finally {
    await stores.close();
  }
};

/** Samples the number of server sessions whose application_name matches `pattern` (LIKE) until stopped; returns the peak. */
async function watchSessions(url: string, pattern: string): Promise<{ stop(): Promise<number> }> {
  const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-watch` });
  await client.connect();
  let peak = 0;
  let stopped = false;
  const sample = async () => {
    const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name LIKE $1`, [pattern]);
    peak = Math.max(peak, Number(rows[0]!.n));
  };
  const loop = (async () => {
    while (!stopped) {
      await sample();
      await sleep(10);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      await sample();
      await client.end();
      return peak;
    },
  };
}

/** The detector's own check: eight pools of `max` (what one pool per store would be) busy at once must show more than max + 1. */
async function separatePoolsPeak(url: string, max: number, applicationName: string): Promise<number> {
  const watch = await watchSessions(url, applicationName);
  const pools = Array.from({ length: 8 }, () => new pg.Pool({ connectionString: url, max, application_name: applicationName }));
  let peak = 0;
  try {
    await Promise.all(pools.flatMap((pool) => Array.from({ length: max }, () => pool.query('SELECT pg_sleep(0.05)'))));
  } finally {
    peak = await watch.stop();
    await Promise.all(pools.map((pool) => pool.end()));
  }
  return peak;
}

export async function connections(backend: Backend, report: BackendReport, budget: Budget['connections']): Promise<void> {
  const check = 'connections';
  if (backend.target.name !== 'postgres') {
    report.notApplicable(check, 'server sessions: PostgreSQL server only');
    return;
  }
  const started = performance.now();
  const url = backend.target.url!;
  const schema = backend.target.namespace;
  const max = budget.poolMax;
  const name = `${APPLICATION_NAME}-conn-${process.pid}`;

  const detector = await separatePoolsPeak(url, max, `${name}-detector`);
  report.expect(check, `detector: 8 separate pools of max ${max} → sessions seen`, detector, `> ${max + 1}`, detector > max + 1);

  const watch = await watchSessions(url, `${name}-one`);
  const stores = storesFromOneUrl({ url, schema, applicationName: `${name}-one`, pool: { max } });
  let single: { calls: number; failed: string[] };
  let peak = 0;
  try {
    await stores.locks.ready(); // detects wake-ups: the LISTEN connection is part of the count
    single = await mixedWorkload(stores, budget.calls, 'one');
  } finally {
    await stores.close();
    peak = await watch.stop();
  }
  report.expect(check, `one process, 8 stores from one URL, pool max ${max}: server sessions at peak`, peak, `1 … ${max + 1}`, peak >= 1 && peak <= max + 1);
  report.expect(check, `failed calls (of ${single.calls})`, single.failed.length, '= 0', single.failed.length === 0);
  for (const failure of single.failed.slice(0, 5)) report.note(`connections (one process): ${failure}`);

  const before = await withClient(url, async (client) => {
    const { rows } = await client.query<{ n: string; max: string }>(
      `SELECT count(*) AS n, current_setting('max_connections') AS max FROM pg_stat_activity WHERE backend_type = 'client backend'`,
    );
    return rows[0]!;
  });
  const children = await watchSessions(url, `${name}-child-%`);
  let results: { calls: number; failed: string[] }[];
  let childPeak = 0;
  try {
    results = await runWorkers<ClientParams, { calls: number; failed: string[] }>(
      backend,
      'connections-client',
      connectionsClient,
      budget.processes,
      (index) => ({ url, schema, poolMax: max, calls: budget.callsPerProcess, applicationName: `${name}-child-${index}` }),
      { hardLimitMs: budget.timeLimitMs + 30_000 },
    );
  } finally {
    childPeak = await children.stop();
  }
  const calls = results.reduce((sum, r) => sum + r.calls, 0);
  const failed = results.flatMap((r) => r.failed);
  report.info(check, `server max_connections / client sessions before the ${budget.processes} processes`, `${before.max} / ${before.n}`);
  report.expect(check, `${budget.processes} processes, each every store from one connect(): failed calls (of ${calls})`, failed.length, '= 0', failed.length === 0);
  report.expect(check, `their server sessions at peak`, childPeak, `≤ ${budget.processes} × ${max + 1}`, childPeak <= budget.processes * (max + 1));
  for (const failure of failed.slice(0, 5)) report.note(`connections (${budget.processes} processes): ${failure}`);
  report.info(check, 'duration', formatMs(performance.now() - started));
}
