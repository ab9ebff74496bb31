import type { JsonValue } from '../json.js';
import type { DatabaseTransaction, StowageResource } from './common.js';

/** A task's progress snapshot (go-go-scope's `Checkpoint`). */
export interface Checkpoint<TData = JsonValue> {
  id: string;
  taskId: string;
  /** Unique per task; saving the same `(taskId, sequence)` twice is `E_VERSION_CONFLICT`. */
  sequence: number;
  /** Epoch ms, chosen by the caller. */
  timestamp: number;
  /** 0..1 or a percentage; stored as given. */
  progress: number;
  data: TData;
  estimatedTimeRemaining?: number;
}

export interface CheckpointStore<TData = JsonValue> extends StowageResource {
  /** Rejects with `E_VERSION_CONFLICT` when the id or `(taskId, sequence)` already exists; nothing is overwritten. */
  save(checkpoint: Checkpoint<TData>): Promise<void>;
  /** The checkpoint with the highest sequence, or `null`. */
  loadLatest(taskId: string): Promise<Checkpoint<TData> | null>;
  load(checkpointId: string): Promise<Checkpoint<TData> | null>;
  /** Ascending by sequence. */
  list(taskId: string): Promise<Checkpoint<TData>[]>;
  /** Keeps the `keepCount` highest sequences of the task and removes the rest. */
  cleanup(taskId: string, keepCount: number): Promise<void>;
  deleteAll(taskId: string): Promise<void>;
  /** This store inside a transaction the caller holds (see `KeyValueStore.withTransaction`); optional. */
  withTransaction?(transaction: DatabaseTransaction): this;
}
