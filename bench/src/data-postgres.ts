/**
 * The big tables of a Postgres backend: stowage's own tables (created by its stores), made
 * unlogged and filled in the server with `INSERT … SELECT generate_series`, once per run, at
 * every size of `config.flatRows`, and dropped when the last section that needs them is done.
 * Rows look like an application's: keys `user:0000001` …, snapshot ids `wf:0000001` … saved a
 * millisecond apart, process items `item:0000001` … in three states.
 */
import {
  PostgresCacheProvider,
  PostgresKeyValueStore,
  PostgresSnapshotStore,
  createPostgresProcessBackend,
  postgres,
  type PostgresProcessBackend,
} from '@stowage/postgres';
import pg from 'pg';
import { sizeLabel } from './sections.ts';

export type DataKind = 'kv' | 'snapshots' | 'cache' | 'process';

/** The name every generated key, id and item starts with, and the pattern that selects 100 of them. */
export const KEY_PREFIX = 'user:';
/** `user:0000100` … `user:0000199`: 100 keys at every size of at least 199 rows. */
export const PREFIX_PATTERN = 'user:00001*';
export const SNAPSHOT_PREFIX = 'wf:00001';
export const PROCESS_NAME = 'orders';
export const PROCESS_STATES = ['pending', 'shipped', 'done'] as const;

const padded = (g: string, prefix: string) => `'${prefix}' || lpad(${g}::text, 7, '0')`;
export const paddedKey = (n: number, prefix = KEY_PREFIX): string => `${prefix}${String(n).padStart(7, '0')}`;

export interface DataStores {
  kv: PostgresKeyValueStore;
  snapshots: PostgresSnapshotStore<object>;
  cache: PostgresCacheProvider;
  process: PostgresProcessBackend;
}

/** Tables of one kind and size, and the stowage store on them (on a pool of one connection). */
export interface BuiltTable<K extends DataKind> {
  kind: K;
  rows: number;
  table: string;
  store: DataStores[K];
  buildMs: number;
}

export class PostgresData {
  readonly #url: string;
  readonly #schema: string;
  /** One connection: every listing runs on the same session, as the generic-plan check needs. */
  readonly #pool: pg.Pool;
  readonly #built = new Map<string, Promise<BuiltTable<DataKind>>>();

  constructor(url: string, schema: string) {
    this.#url = url;
    this.#schema = schema;
    this.#pool = new pg.Pool({ connectionString: url, max: 1 });
  }

  get pool(): pg.Pool {
    return this.#pool;
  }

  get schema(): string {
    return this.#schema;
  }

  /** The table of `kind` with `rows` rows, built on first use. */
  table<K extends DataKind>(kind: K, rows: number): Promise<BuiltTable<K>> {
    const name = `${kind}:${rows}`;
    let built = this.#built.get(name);
    if (built === undefined) this.#built.set(name, (built = this.#build(kind, rows)));
    return built as Promise<BuiltTable<K>>;
  }

  /** Drops the tables of `kind` (all sizes) and closes their stores. */
  async drop(kind: DataKind): Promise<void> {
    for (const [name, built] of [...this.#built]) {
      if (!name.startsWith(`${kind}:`)) continue;
      this.#built.delete(name);
      const table = await built.catch(() => null);
      if (table === null) continue;
      await table.store.close().catch(() => undefined);
      const tables = kind === 'process' ? [`${table.table}_items`, `${table.table}_log`] : [table.table];
      await this.#pool.query(`DROP TABLE IF EXISTS ${tables.map((t) => `${this.#schema}.${t}`).join(', ')} CASCADE`);
    }
  }

  async close(): Promise<void> {
    for (const kind of ['kv', 'snapshots', 'cache', 'process'] as const) await this.drop(kind).catch(() => undefined);
    await this.#pool.end();
  }

  async #build<K extends DataKind>(kind: K, rows: number): Promise<BuiltTable<K>> {
    const started = performance.now();
    const table = `flat_${kind}_${sizeLabel(rows).toLowerCase()}`;
    const s = this.#schema;
    const pool = this.#pool;
    const q = (text: string, values?: unknown[]) => pool.query(text, values);
    let store: DataStores[DataKind];
    const unlogged = async (...tables: string[]) => {
      for (const t of tables) await q(`ALTER TABLE ${s}.${t} SET UNLOGGED`);
    };
    switch (kind) {
      case 'kv': {
        const kv = new PostgresKeyValueStore({ pool, schema: s, table, cleanupInterval: false });
        await kv.ready();
        await unlogged(table);
        await q(
          `INSERT INTO ${s}.${table} (key, value, version, updated_at)
           SELECT ${padded('g', KEY_PREFIX)}, repeat('v', 100), g, date_trunc('milliseconds', now()) FROM generate_series(1, $1::int) g`,
          [rows],
        );
        await q(`SELECT setval('${s}.${table}_version_seq', $1::bigint)`, [rows]);
        store = kv;
        break;
      }
      case 'snapshots': {
        const snapshots = postgres<object>({ pool, schema: s, table, cleanupInterval: false });
        await snapshots.ready();
        await unlogged(table);
        // saved a millisecond apart, newest first: item g of the list is row g
        await q(
          `INSERT INTO ${s}.${table} (prefix, id, snapshot, version, updated_at)
           SELECT '', ${padded('g', 'wf:')}, '{"formatVersion":1,"workflowName":"checkout","steps":{},"execution":{"status":"completed"}}'::json, g,
                  date_trunc('milliseconds', now()) - g * interval '1 millisecond'
           FROM generate_series(1, $1::int) g`,
          [rows],
        );
        await q(`SELECT setval('${s}.${table}_version_seq', $1::bigint)`, [rows]);
        store = snapshots;
        break;
      }
      case 'cache': {
        const cache = new PostgresCacheProvider({ pool, schema: s, table, cleanupInterval: false, prefix: 'bench' });
        await cache.ready();
        await unlogged(table);
        await q(
          `INSERT INTO ${s}.${table} (prefix, key, value, updated_at)
           SELECT 'bench', ${padded('g', KEY_PREFIX)}, '{"id":1,"name":"Ada"}', now() FROM generate_series(1, $1::int) g`,
          [rows],
        );
        store = cache;
        break;
      }
      case 'process': {
        const items = `${table}_items`;
        const log = `${table}_log`;
        const backend = createPostgresProcessBackend({ pool, schema: s, itemsTable: items, transitionsTable: log, wakeups: false });
        await backend.ready();
        await unlogged(items, log);
        await q(
          `INSERT INTO ${s}.${items} (process, id, state, data)
           SELECT $2, ${padded('g', 'item:')}, ($3::text[])[1 + g % 3], '{"sku":"A-1","qty":1}'::json FROM generate_series(1, $1::int) g`,
          [rows, PROCESS_NAME, PROCESS_STATES],
        );
        store = backend;
        break;
      }
      default:
        throw new Error(`unknown table kind ${String(kind)}`);
    }
    await q(`ANALYZE ${s}.${kind === 'process' ? `${table}_items` : table}`);
    return { kind, rows, table, store: store as DataStores[K], buildMs: performance.now() - started };
  }

  /** The snapshot list cursor of row `g` (the `g`th newest), as `listPage` would have returned it. */
  async snapshotCursor(table: string, g: number): Promise<string> {
    const { rows } = await this.#pool.query(
      `SELECT id, (extract(epoch FROM updated_at) * 1000)::bigint::text AS ms FROM ${this.#schema}.${table} WHERE prefix = '' AND id = $1`,
      [paddedKey(g, 'wf:')],
    );
    if (rows.length === 0) throw new Error(`no snapshot row ${g} in ${table}`);
    return Buffer.from(JSON.stringify([Number(rows[0].ms), rows[0].id])).toString('base64url');
  }

  /** Expires rows 1 … `count` of a key-value table (their `expires_at` a minute ago). */
  async expireKeys(table: string, count: number): Promise<void> {
    await this.#pool.query(`UPDATE ${this.#schema}.${table} SET expires_at = now() - interval '1 minute' WHERE key >= $1 AND key <= $2`, [
      paddedKey(1),
      paddedKey(count),
    ]);
    await this.#pool.query(`VACUUM ANALYZE ${this.#schema}.${table}`);
  }

  get url(): string {
    return this.#url;
  }
}

export { PostgresSnapshotStore };
