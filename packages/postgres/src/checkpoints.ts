import {
  StowageError,
  assertCheckpoint,
  assertKeepCount,
  jsonCodec,
  type Checkpoint,
  type CheckpointStore,
  type JsonValue,
} from '@stowage/core';
import { UNIQUE_VIOLATION, sqlState } from './errors.js';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import { decodeText, storedKey } from './key-encoding.js';
import { PostgresStoreBase, epochMs, storeSetup, timestampFromMs, type PostgresStoreOptions } from './store.js';

export type PostgresCheckpointStoreOptions = PostgresStoreOptions;

/**
 * {@link CheckpointStore} on one table (default `stowage_checkpoints`): `id` is the primary
 * key and `(task_id, sequence)` is unique, so saving either twice is `E_VERSION_CONFLICT`
 * and never overwrites. `data` is kept as exact JSON text (`json` column).
 */
export class PostgresCheckpointStore<TData = JsonValue> extends PostgresStoreBase implements CheckpointStore<TData> {
  readonly #table: string;

  constructor(options: PostgresCheckpointStoreOptions | string) {
    const setup = storeSetup('checkpoints', options, DEFAULT_TABLE_NAMES.checkpoints);
    super('PostgresCheckpointStore', setup);
    this.#table = setup.tables[0]![1].sql;
  }

  async save(checkpoint: Checkpoint<TData>): Promise<void> {
    this.assertOpen();
    assertCheckpoint(checkpoint);
    const data = jsonCodec.encode(checkpoint.data);
    try {
      await this.run(
        `INSERT INTO ${this.#table} (id, task_id, sequence, "timestamp", progress, data, estimated_time_remaining)
         VALUES ($1, $2, $3, ${timestampFromMs('$4')}, $5, $6::json, $7)`,
        [
          storedKey(checkpoint.id),
          storedKey(checkpoint.taskId),
          checkpoint.sequence,
          checkpoint.timestamp,
          checkpoint.progress,
          data,
          checkpoint.estimatedTimeRemaining ?? null,
        ],
      );
    } catch (error) {
      if (sqlState(error) === UNIQUE_VIOLATION) {
        throw new StowageError(
          'E_VERSION_CONFLICT',
          `checkpoint "${checkpoint.id}" or sequence ${checkpoint.sequence} of task "${checkpoint.taskId}" already exists`,
          { cause: error },
        );
      }
      throw error;
    }
  }

  async loadLatest(taskId: string): Promise<Checkpoint<TData> | null> {
    this.assertOpen();
    taskId = storedKey(taskId, 'taskId');
    const { rows } = await this.run(`${this.#select} WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1`, [taskId]);
    return rows.length === 0 ? null : toCheckpoint<TData>(rows[0]);
  }

  async load(checkpointId: string): Promise<Checkpoint<TData> | null> {
    this.assertOpen();
    checkpointId = storedKey(checkpointId, 'checkpoint id');
    const { rows } = await this.run(`${this.#select} WHERE id = $1`, [checkpointId]);
    return rows.length === 0 ? null : toCheckpoint<TData>(rows[0]);
  }

  async list(taskId: string): Promise<Checkpoint<TData>[]> {
    this.assertOpen();
    taskId = storedKey(taskId, 'taskId');
    const { rows } = await this.run(`${this.#select} WHERE task_id = $1 ORDER BY sequence ASC`, [taskId]);
    return rows.map((row: CheckpointRow) => toCheckpoint<TData>(row));
  }

  async cleanup(taskId: string, keepCount: number): Promise<void> {
    this.assertOpen();
    taskId = storedKey(taskId, 'taskId');
    assertKeepCount(keepCount);
    await this.run(
      `DELETE FROM ${this.#table} WHERE task_id = $1 AND id NOT IN (
         SELECT id FROM ${this.#table} WHERE task_id = $1 ORDER BY sequence DESC LIMIT $2
       )`,
      [taskId, keepCount],
    );
  }

  async deleteAll(taskId: string): Promise<void> {
    this.assertOpen();
    taskId = storedKey(taskId, 'taskId');
    await this.run(`DELETE FROM ${this.#table} WHERE task_id = $1`, [taskId]);
  }

  get #select(): string {
    return `SELECT id, task_id, sequence, ${epochMs('"timestamp"')} AS "timestamp", progress, data::text AS data,
              estimated_time_remaining FROM ${this.#table}`;
  }
}

interface CheckpointRow {
  id: string;
  task_id: string;
  sequence: string | number;
  timestamp: number;
  progress: number;
  data: string;
  estimated_time_remaining: number | null;
}

function toCheckpoint<TData>(row: CheckpointRow): Checkpoint<TData> {
  const checkpoint: Checkpoint<TData> = {
    id: decodeText(row.id),
    taskId: decodeText(row.task_id),
    sequence: Number(row.sequence),
    timestamp: Number(row.timestamp),
    progress: Number(row.progress),
    data: JSON.parse(row.data) as TData,
  };
  if (row.estimated_time_remaining !== null) checkpoint.estimatedTimeRemaining = Number(row.estimated_time_remaining);
  return checkpoint;
}
