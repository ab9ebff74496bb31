/**
 * A Postgres backend (the server, or PGlite in its own process): stowage on a bench-owned
 * pool, the raw `pg` replay of its statements on a twin pool, and @keyv/postgres.
 */
import KeyvPostgres from '@keyv/postgres';
import Keyv from 'keyv';
import pg from 'pg';
import { config } from '../config.ts';
import { buildOps, unavailableStowage } from '../ops.ts';
import { keyvPeers } from '../peers.ts';
import { installPgObserver, recordPg, type PgStatement } from '../pg-observer.ts';
import { pgReplayer } from '../replay.ts';
import type { BackendBench, Impl, Observation, OpBench } from '../types.ts';
import { openPostgresLockProvider, openStowagePostgres } from './stowage-postgres.ts';

export const BENCH_SCHEMA = 'stowage_bench';

/**
 * The object in `column` of the row a replayed read found (see `OpBench.returnsCallerValue`):
 * text is parsed here; a `json` column (snapshots) arrives parsed by `pg` already.
 */
function parseFoundValue(result: unknown, column: string): unknown {
  const row = (result as pg.QueryResult<Record<string, unknown>>).rows[0];
  if (row === undefined) return null;
  const found = row[column];
  return typeof found === 'string' ? JSON.parse(found) : found;
}

function describe(statement: PgStatement): string {
  const text = statement.text.replace(/\s+/g, ' ').trim();
  const params = statement.values === undefined ? '' : ` [${statement.values.length} params]`;
  const name = statement.name === undefined ? '' : ` (prepared "${statement.name}")`;
  return `${text}${params}${name}`;
}

export async function postgresBackend(id: 'pglite' | 'postgres', title: string, url: string, label: string): Promise<BackendBench> {
  installPgObserver();
  const poolOptions = { connectionString: url, max: config.poolSize };
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  // every run starts from empty tables: the same work on every run
  await admin.query(`DROP SCHEMA IF EXISTS ${BENCH_SCHEMA} CASCADE`);
  await admin.query(`CREATE SCHEMA ${BENCH_SCHEMA}`);
  await admin.end();

  const stowagePool = new pg.Pool(poolOptions);
  const rawPool = new pg.Pool(poolOptions);
  const lockPools: pg.Pool[] = [];

  let stowageError: string | null = null;
  let opened: Awaited<ReturnType<typeof openStowagePostgres>> | null = null;
  try {
    opened = await openStowagePostgres(stowagePool, BENCH_SCHEMA);
  } catch (error) {
    stowageError = (error as Error).message;
  }

  // @keyv/postgres keeps one module-level pool per URI; the same size as ours
  const keyvStore = new KeyvPostgres({ uri: url, schema: BENCH_SCHEMA, table: 'keyv', max: config.poolSize });
  const keyv = new Keyv({ store: keyvStore, namespace: 'bench' });
  keyv.on('error', () => undefined);

  const set = opened?.set ?? unavailableStowage(stowageError ?? 'stowage not loaded');
  const ops: OpBench[] = buildOps(set, set, keyvPeers('@keyv/postgres', keyv, keyv));

  return {
    id,
    title,
    label,
    driver: 'pg 8.23.1',
    ops,
    stowage: opened?.set ?? null,
    stowageError,
    notes: [],
    async newLockProvider(wakeups) {
      if (opened === null) return { unavailable: stowageError ?? 'stowage not loaded' };
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      lockPools.push(pool);
      const provider = await openPostgresLockProvider(pool, BENCH_SCHEMA, wakeups);
      if (wakeups && !provider.capabilities.wakeups) {
        await provider.close();
        return { unavailable: 'LISTEN/NOTIFY did not work on this server (capabilities.wakeups = false)' };
      }
      return { provider, close: () => provider.close() };
    },
    async resetData() {
      const { rows } = await rawPool.query(
        `SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables WHERE schemaname = $1 `,
        [BENCH_SCHEMA],
      );
      if (rows.length > 0) await rawPool.query(`TRUNCATE ${rows.map((row: { name: string }) => row.name).join(', ')}`);
    },
    async observe(fn): Promise<Observation> {
      const { statements } = await recordPg(fn);
      return { count: statements.length, descriptions: statements.map(describe), capture: statements };
    },
    rawFor(op: OpBench, observation: Observation): Impl {
      const replayer = pgReplayer(rawPool, observation.capture as PgStatement[], op.callerValues);
      const replay = (i: number) => replayer.run((j) => op.keys.key(i, j));
      const column = op.returnsCallerValue;
      const run = column === undefined ? replay : (i: number) => replay(i).then((result) => parseFoundValue(result, column));
      return { name: 'raw pg', kind: 'raw', keyParams: replayer.markers, run };
    },
    async close() {
      await opened?.close().catch(() => undefined);
      await keyvStore.disconnect().catch(() => undefined);
      await Promise.all([stowagePool.end(), rawPool.end(), ...lockPools.map((p) => p.end())]);
    },
  };
}
