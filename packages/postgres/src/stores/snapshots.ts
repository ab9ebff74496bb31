import { StowageError, type LockingSnapshotStore, type WorkflowLock, type WorkflowSnapshot } from '@stowage/core';
import { FINISHED_STATUSES, SnapshotStoreBase, type SnapshotCursor, type SnapshotStoreBaseOptions, type StoredSnapshot, type StoredSnapshotItem } from '@stowage/core/adapter';
import type { PostgresQueryResult } from '../connection/types.js';
import { storeDatabase, type StoreDatabase } from '../database.js';
import { decodeText, encodeText } from '../key-encoding.js';
import { postgresSettings, storeIdentity, type PostgresStoreOptions } from '../options.js';
import type { TableKind, TableName } from '../schema/names.js';
import { NOW_MS, clearExpiredBatchSql, clearExpiredInBatches, dateFromMs, epochMs, inKeyRange, keyRange, msInterval, nextval, timestampFromMs } from '../sql.js';
import { LeaseTable } from './leases.js';

export interface PostgresWorkflowLockOptions {
  /** Table of the workflow leases (default `awaitly_workflow_locks`). */
  lockTableName?: string;
  /** Lease length when `tryAcquire` gets no `ttlMs` (default 30,000 ms). */
  ttl?: number;
}

export interface PostgresSnapshotStoreOptions extends PostgresStoreOptions {
  /** The store's namespace (default `''`): stores with different prefixes on one table never see each other's snapshots. */
  prefix?: string;
  /** Also implement awaitly's `WorkflowLock`, so one process runs a workflow id at a time (`true`: default lock options). */
  lock?: PostgresWorkflowLockOptions | boolean;
  /**
   * How long snapshots of finished workflows are kept (default: for ever). With `finishedAfter`,
   * the background sweeper (and {@link PostgresSnapshotStore.clearFinished}) deletes this
   * store's snapshots whose `execution.status` is `"completed"` or `"failed"` and that were not
   * saved for that many ms (server clock): awaitly's `idem:<key>` records of completed runs,
   * for example. A snapshot without that status (a running workflow, a document of another
   * shape) is never removed.
   */
  snapshotRetention?: PostgresSnapshotRetention;
}

/** See {@link PostgresSnapshotStoreOptions.snapshotRetention}. */
export interface PostgresSnapshotRetention {
  /** Ms after its last save that a finished workflow's snapshot is deleted. */
  finishedAfter?: number;
}

/**
 * {@link SnapshotStore} on one table (default `awaitly_snapshots`), a drop-in `store` for
 * awaitly's `durable.run`. A row is `(prefix, id)`: the prefix is the store's namespace.
 *
 * Snapshots are kept in a `json` column, which stores the document text exactly as saved:
 * unlike `jsonb` it keeps key order and accepts `\u0000` in strings, so every JSON object
 * round-trips identically, and `->`/`->>` still work for queries. `updated_at` comes from the
 * server clock at millisecond precision, so list cursors page exactly. Versions come from the
 * table's sequence: never reused for an id, also after delete.
 */
export class PostgresSnapshotStore<TSnapshot extends object = WorkflowSnapshot> extends SnapshotStoreBase<TSnapshot> {
  readonly #db: StoreDatabase;
  readonly #table: TableName;
  /** The table's statements, once its id column is known (see `snapshotIdColumn`). */
  #sql: SnapshotStatements | undefined;

  constructor(options: PostgresSnapshotStoreOptions | string) {
    const { table, identity, db, base, lockTable } = resolveSnapshotStore(options, new.target === PostgresSnapshotStore);
    super(identity, db, base);
    this.#db = db;
    this.#table = table;
    if (lockTable) db.sweep(lockTable, { key: 'leases:expired', run: () => this.clearExpiredLocks!() });
    if (this.finishedAfter !== undefined) {
      db.sweep(table, { key: `snapshots:finished:${JSON.stringify(this.prefix)}:${this.finishedAfter}`, run: () => this.clearFinished() });
    }
  }

  /** `clearFinished()` (the kit's), in batches of one statement each. */
  protected override _clearFinished(finishedAfter: number): Promise<number> {
    return clearExpiredInBatches(() => this.#run('clearFinished', [this.prefix, finishedAfter]), this.closeSignal);
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  /** Its view is a plain snapshot store: the workflow lock's leases cannot live in a transaction. */
  protected override _bind(transaction: object): this {
    return new PostgresSnapshotStore<TSnapshot>({ ...this.#db.viewOptions<PostgresSnapshotStoreOptions>(transaction), lock: undefined }) as this;
  }

  protected async _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean> {
    const values = [this.prefix, encodeText(id), document];
    if (expectedVersion === undefined) {
      await this.#run('save', values);
      return true;
    }
    const { rows } =
      expectedVersion === null
        ? await this.#run('create', values)
        : await this.#run('update', [...values, expectedVersion]);
    return rows.length > 0;
  }

  protected async _load(id: string): Promise<StoredSnapshot | null> {
    const { rows } = await this.#run('load', [this.prefix, encodeText(id)]);
    if (rows.length === 0) return null;
    // pg parses `json` itself; a pool whose parser was turned off hands back the text.
    return { document: rows[0].snapshot, version: Number(rows[0].version), updatedAt: dateFromMs(rows[0].updated_at)! };
  }

  protected async _delete(id: string): Promise<void> {
    await this.#run('delete', [this.prefix, encodeText(id)]);
  }

  /**
   * Newest first (ties by id), keyset-paginated along the list index `(prefix, updated_at DESC,
   * id)`: a page reads its rows and no more, wherever the cursor is. An id prefix narrows by
   * the range of ids that start with it (see `keyRange`).
   */
  protected async _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]> {
    const values: unknown[] = [this.prefix, limit];
    if (idPrefix !== '') {
      const { lo, hi } = keyRange(encodeText(idPrefix));
      values.push(lo, hi);
    }
    // The cursor's time as epoch ms: compared exactly with `updated_at`, which is stored at ms precision.
    if (after !== null) values.push(after.updatedAt.getTime(), encodeText(after.id));
    const statement = idPrefix === '' ? (after === null ? 'list' : 'listAfter') : after === null ? 'listInRange' : 'listInRangeAfter';
    const { rows } = await this.#run(statement, values);
    return rows.map((row: { id: string; updated_ms: number }) => ({ id: decodeText(row.id), updatedAt: dateFromMs(row.updated_ms)! }));
  }

  /**
   * Runs one of the table's statements. The first call learns the table's id column (`id`, or
   * `snapshot_id` in a table adopted from awaitly-postgres) once the table is ready; every later
   * call sends its statement at once.
   */
  #run(statement: keyof SnapshotStatements, values: unknown[]): Promise<PostgresQueryResult> {
    if (this.#sql !== undefined) return this.#db.run(this.#sql[statement], values);
    return this.#db.snapshotIdColumn(this.#table).then((column) => {
      this.#sql ??= snapshotStatements(this.#table, column);
      return this.#db.run(this.#sql[statement], values);
    });
  }
}

/**
 * The fixed statements of a snapshot store, built once (see `keyValueStatements` in kv.ts).
 *
 * Listings order by the table's `s.updated_at`, not by the epoch-ms output column (named
 * `updated_ms` so that it cannot be taken for it): ordered by the column, a page is read in
 * the order of the list index `(prefix, updated_at DESC, id)` and stops after `$2` rows; ordered
 * by the computed column, every listing read and sorted all of the prefix's rows.
 */
export type SnapshotStatements = ReturnType<typeof snapshotStatements>;

/** `id`: the table's id column (`snapshot_id` in a table adopted from awaitly-postgres). */
export function snapshotStatements(table: TableName, id = 'id') {
  const t = table.sql;
  const version = nextval(table.derived('version_seq'));
  const insert = `INSERT INTO ${t} AS s (prefix, ${id}, snapshot, version, updated_at) VALUES ($1, $2, $3::json, ${version}, ${NOW_MS})`;
  // $1 the store's prefix, $2 the page size.
  const list = `SELECT s.${id} AS id, ${epochMs('s.updated_at')} AS updated_ms FROM ${t} AS s WHERE s.prefix = $1`;
  const order = `ORDER BY s.updated_at DESC, s.${id} LIMIT $2`;
  // After the cursor (epoch ms, id) in list order. `s.updated_at <= time` is what lets the
  // index scan start at the cursor rather than at the newest row.
  const afterCursor = (ms: string, cursorId: string) => {
    const time = timestampFromMs(ms);
    return `s.updated_at <= ${time} AND (s.updated_at < ${time} OR s.${id} > ${cursorId})`;
  };
  const idRange = inKeyRange(`s.${id}`, '$3', '$4');
  return {
    save: `${insert} ON CONFLICT (prefix, ${id}) DO UPDATE SET snapshot = EXCLUDED.snapshot, version = ${version}, updated_at = EXCLUDED.updated_at`,
    // save(…, { expectedVersion: null })
    create: `${insert} ON CONFLICT (prefix, ${id}) DO NOTHING RETURNING version`,
    // save(…, { expectedVersion })
    update: `UPDATE ${t} SET snapshot = $3::json, version = ${version}, updated_at = ${NOW_MS}
      WHERE prefix = $1 AND ${id} = $2 AND version = $4 RETURNING version`,
    load: `SELECT snapshot, version, ${epochMs('updated_at')} AS updated_at FROM ${t} WHERE prefix = $1 AND ${id} = $2`,
    delete: `DELETE FROM ${t} WHERE prefix = $1 AND ${id} = $2`,
    list: `${list} ${order}`,
    listAfter: `${list} AND ${afterCursor('$3', '$4')} ${order}`,
    // list({ prefix }): ids from $3 (inclusive) to $4 (exclusive).
    listInRange: `${list} AND ${idRange} ${order}`,
    listInRangeAfter: `${list} AND ${idRange} AND ${afterCursor('$5', '$6')} ${order}`,
    // clearFinished: finished snapshots of prefix $1 not saved for $2 ms, on the list index's
    // (prefix, updated_at) range; the status is read from the document only for those rows.
    clearFinished: clearExpiredBatchSql(
      t,
      `prefix = $1 AND updated_at < statement_timestamp() - ${msInterval('$2')} AND (snapshot -> 'execution' ->> 'status') IN (${FINISHED.join(', ')})`,
    ),
  };
}

/**
 * A snapshot store that is also awaitly's `WorkflowLock` (created by `postgres({ lock })`):
 * leases in their own table (default `awaitly_workflow_locks`), on the server clock.
 */
export class PostgresLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends PostgresSnapshotStore<TSnapshot>
  implements LockingSnapshotStore<TSnapshot>
{
  declare readonly tryAcquire: WorkflowLock['tryAcquire'];
  declare readonly release: WorkflowLock['release'];
  declare readonly renew: WorkflowLock['renew'];
  declare readonly clearExpiredLocks: () => Promise<number>;

  constructor(options: PostgresSnapshotStoreOptions & { lock: PostgresWorkflowLockOptions | true }) {
    super(options);
  }
}

/**
 * What a snapshot store's constructor starts from (see `resolveStore`): its options checked, its
 * tables (the snapshots', and with `lock` the workflow leases'), its database and its kit
 * options. `plain`: the store is a `PostgresSnapshotStore`, which refuses `lock`.
 */
function resolveSnapshotStore(options: PostgresSnapshotStoreOptions | string, plain: boolean) {
  const { options: given, settings } = postgresSettings(options);
  const lock = workflowLockOptions(given.lock);
  if (lock !== undefined && plain) {
    throw new StowageError('E_INVALID_OPTION', 'lock: create the store with postgres({ lock }) or new PostgresLockingSnapshotStore()');
  }
  const table = settings.mainTable('snapshots');
  const lockTable = lock && settings.table('workflowLocks', lock.lockTableName);
  const tables: [TableKind, TableName][] = [['snapshots', table]];
  if (lockTable) tables.push(['workflowLocks', lockTable]);
  const db = storeDatabase(given, settings, tables, { snapshotPrefix: typeof given.prefix === 'string' ? given.prefix : '' });
  const base: SnapshotStoreBaseOptions = { prefix: given.prefix, snapshotRetention: given.snapshotRetention, ...(lockTable && { workflowLeases: new LeaseTable(db, lockTable), lockTtl: lock?.ttl }) };
  return { table, identity: storeIdentity('PostgresSnapshotStore', table, settings), db, base, lockTable };
}

/** The finished statuses (the kit's) as SQL literals. */
const FINISHED = FINISHED_STATUSES.map((status) => `'${status}'`);

/** `lock` as given: `true` means the defaults, `false`/absent no lock. */
function workflowLockOptions(lock: unknown): PostgresWorkflowLockOptions | undefined {
  if (lock === undefined || lock === false) return undefined;
  if (lock === true) return {};
  if (lock === null || typeof lock !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'lock must be true or an object: { lockTableName?, ttl? }');
  }
  return lock as PostgresWorkflowLockOptions;
}

/**
 * The one-liner of awaitly's Postgres snapshot store: a store for `durable.run`, on a pool of
 * its own (or the `pool` you pass, which it never ends). With `lock`, the store is also
 * awaitly's `WorkflowLock`, sharing the same pool.
 *
 * ```ts
 * const store = postgres(process.env.DATABASE_URL!);
 * ```
 */
export function postgres<TSnapshot extends object = WorkflowSnapshot>(
  options: PostgresSnapshotStoreOptions & { lock: PostgresWorkflowLockOptions | true },
): PostgresLockingSnapshotStore<TSnapshot>;
export function postgres<TSnapshot extends object = WorkflowSnapshot>(
  urlOrOptions: string | PostgresSnapshotStoreOptions,
): PostgresSnapshotStore<TSnapshot>;
export function postgres<TSnapshot extends object = WorkflowSnapshot>(
  urlOrOptions: string | PostgresSnapshotStoreOptions,
): PostgresSnapshotStore<TSnapshot> {
  if (typeof urlOrOptions === 'object' && urlOrOptions !== null && workflowLockOptions(urlOrOptions.lock) !== undefined) {
    return new PostgresLockingSnapshotStore<TSnapshot>(urlOrOptions as PostgresSnapshotStoreOptions & { lock: PostgresWorkflowLockOptions | true });
  }
  return new PostgresSnapshotStore<TSnapshot>(urlOrOptions);
}
