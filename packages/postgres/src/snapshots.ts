import {
  DEFAULT_WORKFLOW_LOCK_TTL,
  StowageError,
  assertExpectedVersion,
  assertSnapshotObject,
  assertValidDuration,
  assertValidOwner,
  jsonCodec,
  newOwnerToken,
  parseListOptions,
  toSnapshotPage,
  type SnapshotListItem,
  type SnapshotListOptions,
  type SnapshotPage,
  type SnapshotPageOptions,
  type SnapshotSaveOptions,
  type SnapshotStore,
  type VersionedSnapshot,
  type WorkflowLock,
  type WorkflowSnapshot,
} from '@stowage/core';
import { PostgresConnection } from './connection.js';
import { decodeText, encodeText, storedKey, storedPrefixLike } from './key-encoding.js';
import { LeaseTable } from './leases.js';
import { DEFAULT_TABLE_NAMES, DEFAULT_WORKFLOW_LOCK_TABLE, TableName } from './schema.js';
import {
  PostgresStoreBase,
  autoCreateOption,
  epochMs,
  type PostgresStoreOptions,
  type StoreSetup,
} from './store.js';

export interface PostgresWorkflowLockOptions {
  /** Table of the workflow leases (default `awaitly_workflow_locks`). */
  lockTableName?: string;
  /** Lease length when `tryAcquire` gets no `ttlMs` (default 30,000 ms). */
  ttl?: number;
}

export interface PostgresSnapshotStoreOptions extends PostgresStoreOptions {
  /** Table name (default `awaitly_snapshots`). */
  table?: string;
  /** Prepended to every id in the table; `list()` returns ids without it (default `''`). */
  prefix?: string;
  /** Also implement awaitly's `WorkflowLock`, so one process runs a workflow id at a time (`true`: default lock options). */
  lock?: PostgresWorkflowLockOptions | boolean;
}

/**
 * {@link SnapshotStore} on one table (seed 003), a drop-in `store` for awaitly's
 * `durable.run`.
 *
 * Snapshots are kept in a `json` column, which stores the document text exactly as saved:
 * unlike `jsonb` it keeps key order and accepts `\u0000` in strings, so every JSON object
 * round-trips identically, and `->`/`->>` still work for queries. `updated_at` comes from the
 * server clock at millisecond precision, so list cursors page exactly.
 */
export class PostgresSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends PostgresStoreBase
  implements SnapshotStore<TSnapshot>
{
  readonly #table: string;
  readonly #sql: ReturnType<typeof snapshotStatements>;
  readonly #prefix: string;

  constructor(options: PostgresSnapshotStoreOptions | string) {
    if (typeof options === 'object' && options?.lock !== undefined && options.lock !== false && new.target === PostgresSnapshotStore) {
      throw new StowageError('E_INVALID_OPTION', 'lock: create the store with postgres({ lock }) or new PostgresLockingSnapshotStore()');
    }
    super('PostgresSnapshotStore', snapshotSetup(options));
    const parsed = typeof options === 'string' ? {} : options;
    this.#table = new TableName(parsed.table ?? DEFAULT_TABLE_NAMES.snapshots, parsed.schema).sql;
    this.#sql = snapshotStatements(this.#table);
    this.#prefix = parsed.prefix ?? '';
  }

  async save(id: string, snapshot: TSnapshot, options?: SnapshotSaveOptions): Promise<void> {
    this.assertOpen();
    const key = this.#key(id);
    assertSnapshotObject(snapshot);
    const document = jsonCodec.encode(snapshot);
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', 'save options must be an object');
    }
    const expected = options?.expectedVersion;
    assertExpectedVersion(expected);
    if (expected === undefined) {
      await this.run(this.#sql.save, [key, document]);
      return;
    }
    const { rows } =
      expected === null
        ? await this.run(this.#sql.create, [key, document])
        : await this.run(this.#sql.update, [key, document, expected]);
    if (rows.length === 0) {
      throw new StowageError(
        'E_VERSION_CONFLICT',
        `snapshot "${id}" is not at version ${expected === null ? '(absent)' : expected}`,
      );
    }
  }

  async load(id: string): Promise<TSnapshot | null> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.load, [this.#key(id)]);
    return rows.length === 0 ? null : parsedSnapshot<TSnapshot>(rows[0].snapshot);
  }

  async loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.loadVersioned, [this.#key(id)]);
    if (rows.length === 0) return null;
    return {
      snapshot: parsedSnapshot<TSnapshot>(rows[0].snapshot),
      version: Number(rows[0].version),
      updatedAt: new Date(Number(rows[0].updated_at)).toISOString(),
    };
  }

  async delete(id: string): Promise<void> {
    this.assertOpen();
    await this.run(this.#sql.delete, [this.#key(id)]);
  }

  async list(options?: SnapshotListOptions): Promise<SnapshotListItem[]> {
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', 'list options must be an object');
    }
    return (await this.listPage({ prefix: options?.prefix, limit: options?.limit })).items;
  }

  /** Newest first (ties by id); one statement per page, keyset-paginated on `(updated_at, id)`. */
  async listPage(options?: SnapshotPageOptions): Promise<SnapshotPage> {
    this.assertOpen();
    const { prefix, limit, after } = parseListOptions(options);
    const values: unknown[] = [storedPrefixLike(this.#prefix + prefix), limit + 1];
    let position = '';
    if (after !== null) {
      values.push(after.updatedAt, encodeText(this.#prefix + after.id));
      position = `AND (updated_at < $3::timestamptz OR (updated_at = $3::timestamptz AND id > $4))`;
    }
    const { rows } = await this.run(
      `SELECT id, ${epochMs('updated_at')} AS updated_at FROM ${this.#table}
       WHERE id LIKE $1 ${position}
       ORDER BY updated_at DESC, id ASC LIMIT $2`,
      values,
    );
    const prefixLength = encodeText(this.#prefix).length;
    const items = rows.map((row: { id: string; updated_at: number }) => ({
      id: decodeText(row.id.slice(prefixLength)),
      updatedAt: new Date(Number(row.updated_at)).toISOString(),
    }));
    return toSnapshotPage(items, limit);
  }

  /** The id as stored: the store's prefix plus `id`. */
  #key(id: string): string {
    storedKey(id, 'snapshot id');
    return encodeText(this.#prefix + id);
  }
}

/** The fixed statements of a snapshot store, built once (see `keyValueStatements` in kv.ts). */
function snapshotStatements(table: string) {
  const now = `date_trunc('milliseconds', now())`;
  return {
    save: `INSERT INTO ${table} AS s (id, snapshot, version, updated_at) VALUES ($1, $2::json, 1, ${now})
      ON CONFLICT (id) DO UPDATE SET snapshot = EXCLUDED.snapshot, version = s.version + 1, updated_at = EXCLUDED.updated_at`,
    // save(…, { expectedVersion: null })
    create: `INSERT INTO ${table} (id, snapshot, version, updated_at) VALUES ($1, $2::json, 1, ${now})
      ON CONFLICT (id) DO NOTHING RETURNING version`,
    // save(…, { expectedVersion })
    update: `UPDATE ${table} SET snapshot = $2::json, version = version + 1, updated_at = ${now}
      WHERE id = $1 AND version = $3 RETURNING version`,
    load: `SELECT snapshot FROM ${table} WHERE id = $1`,
    loadVersioned: `SELECT snapshot, version, ${epochMs('updated_at')} AS updated_at FROM ${table} WHERE id = $1`,
    delete: `DELETE FROM ${table} WHERE id = $1`,
  };
}

/**
 * A snapshot store that is also awaitly's `WorkflowLock` (created by `postgres({ lock })`):
 * leases in their own table, on the server clock, keyed by the store's prefix plus the id.
 */
export class PostgresLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends PostgresSnapshotStore<TSnapshot>
  implements WorkflowLock
{
  readonly #leases: LeaseTable;
  readonly #ttl: number;
  readonly #prefix: string;

  constructor(options: PostgresSnapshotStoreOptions & { lock: PostgresWorkflowLockOptions | true }) {
    super(options);
    const lock = workflowLockOptions(options.lock) ?? {};
    const lockTable = new TableName(lock.lockTableName ?? DEFAULT_WORKFLOW_LOCK_TABLE, options.schema);
    this.#leases = new LeaseTable((text, values) => this.run(text, values), lockTable);
    this.#ttl = lock.ttl ?? DEFAULT_WORKFLOW_LOCK_TTL;
    this.#prefix = options.prefix ?? '';
  }

  async tryAcquire(id: string, options?: { ttlMs?: number }): Promise<{ ownerToken: string } | null> {
    this.assertOpen();
    const key = this.#lockKey(id);
    const ttl = this.#ttlOf(options);
    const ownerToken = newOwnerToken();
    return (await this.#leases.acquire(key, ownerToken, ttl)) === null ? null : { ownerToken };
  }

  async release(id: string, ownerToken: string): Promise<void> {
    this.assertOpen();
    const key = this.#lockKey(id);
    assertValidOwner(ownerToken);
    await this.#leases.release(key, ownerToken);
  }

  async renew(id: string, ownerToken: string, options?: { ttlMs?: number }): Promise<boolean> {
    this.assertOpen();
    const key = this.#lockKey(id);
    assertValidOwner(ownerToken);
    return (await this.#leases.extend(key, ownerToken, this.#ttlOf(options))) !== null;
  }

  /** Deletes expired workflow leases; returns how many. */
  async clearExpiredLocks(): Promise<number> {
    this.assertOpen();
    return this.#leases.clearExpired();
  }

  #lockKey(id: string): string {
    storedKey(id, 'workflow id');
    return this.#prefix + id;
  }

  #ttlOf(options: { ttlMs?: number } | undefined): number {
    const ttl = options?.ttlMs ?? this.#ttl;
    assertValidDuration(ttl, 'ttlMs');
    return ttl;
  }
}

/**
 * The `json` column as a value: pg parses `json` itself (with `JSON.parse`, the default type
 * parser), so the text is parsed once. A pool whose parser was turned off hands back text.
 */
function parsedSnapshot<TSnapshot>(column: unknown): TSnapshot {
  return (typeof column === 'string' ? JSON.parse(column) : column) as TSnapshot;
}

function snapshotSetup(options: PostgresSnapshotStoreOptions | string): StoreSetup {
  if (typeof options === 'string') options = { url: options };
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'options must be a URL or an object');
  }
  if (options.prefix !== undefined && typeof options.prefix !== 'string') {
    throw new StowageError('E_INVALID_OPTION', 'prefix must be a string');
  }
  const tables: StoreSetup['tables'][number][] = [
    ['snapshots', new TableName(options.table ?? DEFAULT_TABLE_NAMES.snapshots, options.schema)],
  ];
  const lock = workflowLockOptions(options.lock);
  if (lock !== undefined) {
    if (lock.ttl !== undefined) assertValidDuration(lock.ttl, 'lock.ttl');
    tables.push(['locks', new TableName(lock.lockTableName ?? DEFAULT_WORKFLOW_LOCK_TABLE, options.schema)]);
  }
  const connection = PostgresConnection.from(options);
  return { connection, ownsConnection: true, tables, autoCreate: autoCreateOption(options) };
}

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
 * The one-liner of seed 003: a snapshot store for awaitly's `durable.run`, on a pool of its
 * own (or the `pool` you pass, which it never ends). With `lock`, the store is also awaitly's
 * `WorkflowLock`, sharing the same pool.
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
    return new PostgresLockingSnapshotStore<TSnapshot>(
      urlOrOptions as PostgresSnapshotStoreOptions & { lock: PostgresWorkflowLockOptions | true },
    );
  }
  return new PostgresSnapshotStore<TSnapshot>(urlOrOptions);
}
