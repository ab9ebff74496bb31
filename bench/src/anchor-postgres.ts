/**
 * The outside world of the Postgres point operations: the anchor tables (a stowage key-value
 * table and cache of `rows` keys, filled in the server), the raw driver's obvious single
 * statement per call, and `pgbench -S -M prepared` on the same tables.
 */
import type Keyv from 'keyv';
import type pg from 'pg';
import { READ_TARGETS, WRITE_TARGETS, type OthersFor } from './ops.ts';
import { pgbenchImpl } from './pgbench.ts';
import type { Impl } from './types.ts';
import { CACHE_VALUE, KV_VALUE, cacheValue, kvValue, type KeySpace } from './workload.ts';

export const ANCHOR_TABLES = { kv: 'anchor_kv', cache: 'anchor_cache' } as const;
/** The anchor cache's prefix (a column of its rows). */
export const ANCHOR_CACHE_PREFIX = 'bench';
const LIVE = '(expires_at IS NULL OR expires_at > now())';

/** Fills the anchor tables stowage created: keys "1" … "rows", in the server. */
export async function fillAnchorTables(pool: pg.Pool, schema: string, rows: number): Promise<void> {
  const kv = `${schema}.${ANCHOR_TABLES.kv}`;
  const cache = `${schema}.${ANCHOR_TABLES.cache}`;
  await pool.query(`TRUNCATE ${kv}, ${cache}`);
  await pool.query(
    `INSERT INTO ${kv} (key, value, version, updated_at)
     SELECT g::text, $1, nextval('${schema}.${ANCHOR_TABLES.kv}_version_seq'), date_trunc('milliseconds', now()) FROM generate_series(1, $2::int) g`,
    [KV_VALUE, rows],
  );
  await pool.query(`INSERT INTO ${cache} (prefix, key, value, updated_at) SELECT $1, g::text, $2, now() FROM generate_series(1, $3::int) g`, [
    ANCHOR_CACHE_PREFIX,
    JSON.stringify(CACHE_VALUE),
    rows,
  ]);
  await pool.query(`ANALYZE ${kv}, ${cache}`);
}

/** Writes every anchor key into keyv's table in keyv's format (`namespace:key`, `{"value":…}`). */
export function keyvAnchorSeeder(pool: pg.Pool, schema: string, rows: number) {
  return async (keyv: Keyv, value: unknown): Promise<void> => {
    await keyv.set('created', 1); // keyv creates its table on first use
    await pool.query(
      `INSERT INTO ${schema}.keyv (key, value) SELECT 'bench:' || g, $1 FROM generate_series(1, $2::int) g
       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
      [JSON.stringify({ value }), rows],
    );
  };
}

/**
 * The obvious statement per call, as code without stowage would send it: `pool.query(text,
 * values)`, unnamed (parsed and planned each time, as most code does), with the same expiry
 * condition and the same JSON handling as stowage.
 */
export function rawSingleStatements(pool: pg.Pool, schema: string): OthersFor {
  const kv = `${schema}.${ANCHOR_TABLES.kv}`;
  const cache = `${schema}.${ANCHOR_TABLES.cache}`;
  const name = 'raw pg, 1 statement';
  const raw = (run: Impl['run'], target: number): Impl[] => [{ name, kind: 'raw', target, run, knownRoundTrips: 1 }];
  return (op: string, keys: KeySpace): Impl[] => {
    switch (op) {
      case 'kv.get':
        return raw(async (i) => (await pool.query(`SELECT value FROM ${kv} WHERE key = $1 AND ${LIVE}`, [keys.key(i)])).rows[0]?.value ?? null, READ_TARGETS.raw);
      case 'kv.exists':
        return raw(async (i) => (await pool.query(`SELECT 1 FROM ${kv} WHERE key = $1 AND ${LIVE}`, [keys.key(i)])).rows.length > 0, READ_TARGETS.raw);
      case 'cache.get':
        return raw(async (i) => {
          const { rows } = await pool.query(`SELECT value FROM ${cache} WHERE prefix = $1 AND key = $2 AND ${LIVE}`, [ANCHOR_CACHE_PREFIX, keys.key(i)]);
          return rows.length === 0 ? null : JSON.parse(rows[0].value);
        }, READ_TARGETS.raw);
      case 'kv.set':
        return raw(
          (i) =>
            pool.query(
              `INSERT INTO ${kv} AS e (key, value, version, updated_at) VALUES ($1, $2, 1, now())
               ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = e.version + 1, updated_at = now(), expires_at = NULL`,
              [keys.key(i), kvValue(i)],
            ),
          WRITE_TARGETS.raw,
        );
      case 'cache.set':
        return raw(
          (i) =>
            pool.query(
              `INSERT INTO ${cache} (prefix, key, value, updated_at) VALUES ($1, $2, $3, now())
               ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now(), expires_at = NULL`,
              [ANCHOR_CACHE_PREFIX, keys.key(i), JSON.stringify(cacheValue(i))],
            ),
          WRITE_TARGETS.raw,
        );
      default:
        return [];
    }
  };
}

export interface PgbenchSetup {
  url: string;
  schema: string;
  rows: number;
  /** PGlite's socket server is one session: one client (several would share prepared-statement names). */
  maxClients?: number;
}

/** `pgbench -S -M prepared` on the anchor tables, for the point reads. */
export async function pgbenchAnchors(setup: PgbenchSetup): Promise<OthersFor> {
  const statements: Record<string, string> = {
    'kv.get': `SELECT value FROM ${setup.schema}.${ANCHOR_TABLES.kv} WHERE key = :k`,
    'kv.exists': `SELECT 1 FROM ${setup.schema}.${ANCHOR_TABLES.kv} WHERE key = :k`,
    'cache.get': `SELECT value FROM ${setup.schema}.${ANCHOR_TABLES.cache} WHERE prefix = '${ANCHOR_CACHE_PREFIX}' AND key = :k`,
  };
  const impls = new Map<string, Impl>();
  for (const [op, statement] of Object.entries(statements)) {
    const clients = setup.maxClients === undefined ? '' : `, ${setup.maxClients} client`;
    impls.set(
      op,
      await pgbenchImpl(
        `pgbench -S -M prepared${clients}`,
        { url: setup.url, statement, rows: setup.rows, threads: 2, maxClients: setup.maxClients, applicationName: 'stowage_bench_pgbench' },
        READ_TARGETS.anchor,
      ),
    );
  }
  return (op: string) => {
    const impl = impls.get(op);
    return impl === undefined ? [] : [impl];
  };
}
