import type { JsonValue } from '@stowage/core';
import { CheckpointStoreBase, type CheckpointStoreBaseOptions, type StoredCheckpoint } from '@stowage/core/adapter';
import { resolveStore, type StoreDatabase } from '../database.js';
import { decodeText, encodeText } from '../key-encoding.js';
import type { PostgresStoreOptions } from '../options.js';
import { epochMs, timestampFromMs } from '../sql.js';

export interface PostgresCheckpointStoreOptions extends PostgresStoreOptions, CheckpointStoreBaseOptions {}

interface CheckpointRow {
  id: string;
  task_id: string;
  sequence: string | number;
  timestamp: number;
  progress: number;
  data: string;
  estimated_time_remaining: number | null;
}

/**
 * {@link CheckpointStore} on one table (default `stowage_checkpoints`): `id` is the primary
 * key and `(task_id, sequence)` is unique, so saving either twice is `E_VERSION_CONFLICT`
 * (which leaves a caller's transaction usable) and never overwrites (with `onDuplicate: 'replace'`, as go-go-scope needs, it overwrites).
 * `data` is the codec's text (strict JSON by default) in a `text` column.
 */
export class PostgresCheckpointStore<TData = JsonValue> extends CheckpointStoreBase<TData> {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof checkpointStatements>;

  constructor(options: PostgresCheckpointStoreOptions | string) {
    const { given, table, identity, db } = resolveStore('PostgresCheckpointStore', options, 'checkpoints');
    super(identity, db, { codec: given.codec, onDuplicate: given.onDuplicate });
    this.#db = db;
    this.#sql = checkpointStatements(table.sql);
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected override _bind(transaction: object): this {
    return new PostgresCheckpointStore<TData>(this.#db.viewOptions(transaction)) as this;
  }

  protected async _save(checkpoint: StoredCheckpoint): Promise<'saved' | 'id-exists' | 'sequence-exists'> {
    const { id, taskId, sequence, timestamp, progress, data, estimatedTimeRemaining } = checkpoint;
    const { rows } = await this.#db.run(this.#sql.save, [encodeText(id), encodeText(taskId), sequence, timestamp, progress, encodeText(data), estimatedTimeRemaining ?? null]);
    const { saved, id_exists: idExists } = rows[0] as { saved: boolean; id_exists: boolean };
    if (saved) return 'saved';
    return idExists ? 'id-exists' : 'sequence-exists';
  }

  protected override async _replace(checkpoint: StoredCheckpoint): Promise<void> {
    const { id, taskId, sequence, timestamp, progress, data, estimatedTimeRemaining } = checkpoint;
    await this.#db.run(this.#sql.replace, [encodeText(id), encodeText(taskId), sequence, timestamp, progress, encodeText(data), estimatedTimeRemaining ?? null]);
  }

  protected async _load(id: string): Promise<StoredCheckpoint | null> {
    const { rows } = await this.#db.run(this.#sql.load, [encodeText(id)]);
    return rows.length === 0 ? null : toStored(rows[0]);
  }

  protected async _loadLatest(taskId: string): Promise<StoredCheckpoint | null> {
    const { rows } = await this.#db.run(this.#sql.loadLatest, [encodeText(taskId)]);
    return rows.length === 0 ? null : toStored(rows[0]);
  }

  protected async _list(taskId: string): Promise<StoredCheckpoint[]> {
    const { rows } = await this.#db.run(this.#sql.list, [encodeText(taskId)]);
    return rows.map(toStored);
  }

  protected async _cleanup(taskId: string, keepCount: number): Promise<void> {
    await this.#db.run(this.#sql.cleanup, [encodeText(taskId), keepCount]);
  }

  protected async _deleteAll(taskId: string): Promise<void> {
    await this.#db.run(this.#sql.deleteAll, [encodeText(taskId)]);
  }
}

/** The statements of a checkpoint table, built once (see `keyValueStatements` in kv.ts). */
export function checkpointStatements(table: string) {
  // `data::text` also reads tables made when `data` was a `json` column.
  const select = `SELECT id, task_id, sequence, ${epochMs('"timestamp"')} AS "timestamp", progress, data::text AS data,
      estimated_time_remaining FROM ${table}`;
  return {
    // A duplicate id or (task, sequence) inserts nothing and says which it met, without raising
    // a unique violation: inside the caller's transaction (a view) that error would abort the
    // whole transaction, and its COMMIT would silently roll back.
    save: `WITH inserted AS (
        INSERT INTO ${table} (id, task_id, sequence, "timestamp", progress, data, estimated_time_remaining)
        VALUES ($1, $2, $3, ${timestampFromMs('$4')}, $5, $6, $7)
        ON CONFLICT DO NOTHING RETURNING 1
      )
      SELECT EXISTS (SELECT 1 FROM inserted) AS saved, EXISTS (SELECT 1 FROM ${table} WHERE id = $1) AS id_exists`,
    // onDuplicate: 'replace' (go-go-scope re-saves a checkpoint), in one statement: the row of
    // this (task, sequence) takes the new id and fields; without one, the row of this id is
    // inserted or overwritten.
    replace: `WITH moved AS (
        UPDATE ${table} SET id = $1, "timestamp" = ${timestampFromMs('$4')}, progress = $5, data = $6, estimated_time_remaining = $7
        WHERE task_id = $2 AND sequence = $3 RETURNING id
      )
      INSERT INTO ${table} (id, task_id, sequence, "timestamp", progress, data, estimated_time_remaining)
      SELECT $1, $2, $3, ${timestampFromMs('$4')}, $5, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM moved)
      ON CONFLICT (id) DO UPDATE SET task_id = EXCLUDED.task_id, sequence = EXCLUDED.sequence, "timestamp" = EXCLUDED."timestamp",
        progress = EXCLUDED.progress, data = EXCLUDED.data, estimated_time_remaining = EXCLUDED.estimated_time_remaining`,
    load: `${select} WHERE id = $1`,
    loadLatest: `${select} WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1`,
    list: `${select} WHERE task_id = $1 ORDER BY sequence ASC`,
    cleanup: `DELETE FROM ${table} WHERE task_id = $1 AND id NOT IN (
        SELECT id FROM ${table} WHERE task_id = $1 ORDER BY sequence DESC LIMIT $2
      )`,
    deleteAll: `DELETE FROM ${table} WHERE task_id = $1`,
  };
}

function toStored(row: CheckpointRow): StoredCheckpoint {
  const checkpoint: StoredCheckpoint = {
    id: decodeText(row.id),
    taskId: decodeText(row.task_id),
    sequence: Number(row.sequence),
    timestamp: Number(row.timestamp),
    progress: Number(row.progress),
    data: decodeText(row.data),
  };
  if (row.estimated_time_remaining !== null) checkpoint.estimatedTimeRemaining = Number(row.estimated_time_remaining);
  return checkpoint;
}
