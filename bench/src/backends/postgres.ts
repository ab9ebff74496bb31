/**
 * A Postgres backend (the server, or PGlite in its own process): stowage on a bench-owned
 * pool; the anchor tables its point operations share with the raw driver's single
 * statements and `pgbench`; the raw `pg` replay of its statements on a twin pool;
 * @keyv/postgres; and the sections: listings by table size, memory, hand-off, connections.
 */
import KeyvPostgres from '@keyv/postgres';
import Keyv from 'keyv';
import pg from 'pg';
import { fillAnchorTables, keyvAnchorSeeder, pgbenchAnchors, rawSingleStatements } from '../anchor-postgres.ts';
import { config } from '../config.ts';
import { connectionsSection } from '../connections.ts';
import { PostgresData } from '../data-postgres.ts';
import { runFlat } from '../flat.ts';
import { handoffSection } from '../handoff.ts';
import { runHeapGrowth } from '../memory.ts';
import { OPEN_LOOP_ROUTES, openLoopSection } from '../open-loop/section.ts';
import { buildOps, unavailableStowage, type OthersFor } from '../ops.ts';
import { combinePeers, keyvPeers } from '../peers.ts';
import { installPgObserver, recordPg, type PgStatement } from '../pg-observer.ts';
import { pgbenchVersion, removePgbenchFiles } from '../pgbench.ts';
import { pgReplayer } from '../replay.ts';
import { runScanMemory } from '../scan-memory.ts';
import { failedTable } from '../sections.ts';
import type { BackendBench, Impl, Observation, OpBench, Section } from '../types.ts';
import { AnchorKeys } from '../workload.ts';
import { openStowagePostgres } from './stowage-postgres.ts';

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
  const pglite = id === 'pglite';
  const poolOptions = { connectionString: url, max: config.poolSize };
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  // every run starts from empty tables: the same work on every run
  await admin.query(`DROP SCHEMA IF EXISTS ${BENCH_SCHEMA} CASCADE`);
  await admin.query(`CREATE SCHEMA ${BENCH_SCHEMA}`);

  const stowagePool = new pg.Pool(poolOptions);
  const rawPool = new pg.Pool(poolOptions);
  const notes: string[] = [];

  let stowageError: string | null = null;
  let opened: Awaited<ReturnType<typeof openStowagePostgres>> | null = null;
  try {
    opened = await openStowagePostgres(stowagePool, BENCH_SCHEMA);
    await fillAnchorTables(rawPool, BENCH_SCHEMA, config.anchorRows);
  } catch (error) {
    stowageError = (error as Error).message;
  }

  // @keyv/postgres keeps one module-level pool per URI; the same size as ours
  const keyvStore = new KeyvPostgres({ uri: url, schema: BENCH_SCHEMA, table: 'keyv', max: config.poolSize });
  const keyv = new Keyv({ store: keyvStore, namespace: 'bench' });
  keyv.on('error', () => undefined);

  const unavailable = unavailableStowage(stowageError ?? 'stowage not loaded');
  const set = opened?.set ?? unavailable;
  const anchor = opened?.anchor ?? unavailable;
  const anchorVariant = opened?.anchorVariant ?? unavailable;
  const pgbench = await pgbenchVersion();
  let anchors: OthersFor = () => [];
  if (pgbench === null) notes.push('pgbench is not on PATH: the anchor rows are missing (install postgresql-client)');
  else anchors = await pgbenchAnchors({ url, schema: BENCH_SCHEMA, rows: config.anchorRows });
  const ops: OpBench[] = buildOps(
    set,
    set,
    { keys: new AnchorKeys(config.anchorRows), measured: anchor, variant: anchorVariant, observed: anchor, variantObserved: anchorVariant },
    combinePeers(rawSingleStatements(rawPool, BENCH_SCHEMA), anchors, keyvPeers('@keyv/postgres', keyv, keyv, keyvAnchorSeeder(rawPool, BENCH_SCHEMA, config.anchorRows))),
  );
  if (pglite) {
    notes.push('PGlite is one single-threaded session behind a socket server: 32 in flight queue there, and pgbench clients share that session too');
  }

  const data = new PostgresData(url, BENCH_SCHEMA);
  const sections: Section[] = [
    { id: 'flat', run: (log) => runFlat(data, log) },
    {
      id: 'memory',
      run: async (log) => {
        const tables = await runScanMemory(data, log);
        try {
          tables.push(await runHeapGrowth(id, set));
        } catch (error) {
          tables.push(failedTable('heap', 'heap growth', error));
        }
        return tables;
      },
    },
    handoffSection((wakeups) => ({
      kind: 'postgres',
      url,
      schema: BENCH_SCHEMA,
      wakeups,
      poolSize: config.poolSize,
      applicationName: 'stowage_bench_handoff',
    }), { polling: true }),
  ];
  sections.push(
    openLoopSection({
      backend: 'postgres',
      id,
      url,
      namespace: BENCH_SCHEMA,
      rows: config.anchorRows,
      // PGlite is one session: prepared statements of two pool clients would share its names
      impls: pglite ? ['stowage', 'raw pg, unnamed', '@keyv/postgres'] : ['stowage', 'raw pg, prepared', 'raw pg, unnamed', '@keyv/postgres'],
      targets: !pglite,
      routes: pglite ? OPEN_LOOP_ROUTES.map((route) => ({ ...route, rates: [100, 250, 500, 1_000, 2_000, 4_000] })) : OPEN_LOOP_ROUTES,
    }),
  );
  if (!pglite) sections.push(connectionsSection(url, BENCH_SCHEMA));
  else {
    sections.push({
      id: 'connections',
      run: async () => [
        {
          id: 'connections',
          title: 'connections',
          header: ['processes'],
          align: ['l'],
          rows: [{ cells: ['-'], note: "n/a: PGlite's socket server is one session; pg_stat_activity does not see its clients" }],
          notes: [],
        },
      ],
    });
  }

  return {
    id,
    title,
    label,
    driver: `pg 8.23.1${pgbench ? `, ${pgbench}` : ''}`,
    ops,
    stowage: opened?.set ?? null,
    stowageError,
    notes,
    sections,
    async resetData() {
      // the anchor and big tables are filled once per run; everything else starts empty
      const { rows } = await rawPool.query(
        `SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables
         WHERE schemaname = $1 AND tablename NOT LIKE 'anchor\\_%' AND tablename NOT LIKE 'flat\\_%'`,
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
      return { name: "replay of stowage's SQL", kind: 'replay', keyParams: replayer.markers, run };
    },
    async close() {
      await opened?.close().catch(() => undefined);
      await data.close().catch(() => undefined);
      await keyvStore.disconnect().catch(() => undefined);
      await removePgbenchFiles().catch(() => undefined);
      await Promise.all([stowagePool.end(), rawPool.end()]);
      // the big tables go with the schema: nothing of the run stays on the server
      await admin.query(`DROP SCHEMA IF EXISTS ${BENCH_SCHEMA} CASCADE`).catch(() => undefined);
      await admin.end();
    },
  };
}
