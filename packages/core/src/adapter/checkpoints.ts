import type { Checkpoint, CheckpointStore } from '../contracts/checkpoints.js';
import { StowageError } from '../errors.js';
import { assertCodec, decodeValue, encodeValue, jsonCodec, type Codec, type JsonValue } from '../json.js';
import { assertValidKey, describeType, describeValue } from '../keys.js';
import type { StoreIdentity } from '../diagnostics.js';
import { StoreBase, type StoreHandle } from './store.js';

/** A checkpoint as the backend stores it: `data` is the codec's text. */
export interface StoredCheckpoint {
  id: string;
  taskId: string;
  sequence: number;
  timestamp: number;
  progress: number;
  estimatedTimeRemaining?: number;
  data: string;
}

export interface CheckpointStoreBaseOptions {
  /** How `data` becomes text. Default: strict JSON. */
  codec?: Codec;
  /**
   * What saving an existing id or `(taskId, sequence)` does: `'reject'` (default) rejects with
   * `E_VERSION_CONFLICT` and keeps the original; `'replace'` overwrites it, as go-go-scope's own
   * checkpoint adapters do (its interval auto-save saves the same checkpoint again).
   */
  onDuplicate?: 'reject' | 'replace';
}

/**
 * The whole {@link CheckpointStore} behaviour over a few backend operations: argument checks
 * and the codec of `data` (the same on every backend). The backend keeps checkpoints unique
 * by id and by `(taskId, sequence)`.
 */
export abstract class CheckpointStoreBase<TData = JsonValue> extends StoreBase implements CheckpointStore<TData> {
  readonly #codec: Codec;
  readonly #replace: boolean;

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: CheckpointStoreBaseOptions = {}) {
    super(identity, handle, 'checkpoints');
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
    const onDuplicate = options.onDuplicate ?? 'reject';
    if (onDuplicate !== 'reject' && onDuplicate !== 'replace') {
      throw new StowageError('E_INVALID_OPTION', `onDuplicate must be "reject" or "replace", got ${describeValue(onDuplicate)}`);
    }
    if (onDuplicate === 'replace' && !this._replace) {
      throw new StowageError('E_INVALID_OPTION', `${this.identity.name} cannot replace checkpoints (onDuplicate: "replace")`);
    }
    this.#replace = onDuplicate === 'replace';
  }

  save(checkpoint: Checkpoint<TData>): Promise<void> {
    return this.call('checkpoints.save', async () => {
      assertCheckpoint(checkpoint);
      const { id, taskId, sequence, timestamp, progress, estimatedTimeRemaining } = checkpoint;
      const stored: StoredCheckpoint = { id, taskId, sequence, timestamp, progress, data: encodeValue(this.#codec, checkpoint.data, 'data') };
      if (estimatedTimeRemaining !== undefined) stored.estimatedTimeRemaining = estimatedTimeRemaining;
      if (this.#replace) return this._replace!(stored);
      const outcome = await this._save(stored);
      if (outcome === 'id-exists') throw new StowageError('E_VERSION_CONFLICT', `checkpoint "${id}" already exists`);
      if (outcome === 'sequence-exists') {
        throw new StowageError('E_VERSION_CONFLICT', `task "${taskId}" already has a checkpoint with sequence ${sequence}`);
      }
    }, checkpoint?.id);
  }

  loadLatest(taskId: string): Promise<Checkpoint<TData> | null> {
    return this.call('checkpoints.loadLatest', async () => {
      assertValidKey(taskId, 'taskId');
      return this.#decode(await this._loadLatest(taskId));
    }, taskId);
  }

  load(checkpointId: string): Promise<Checkpoint<TData> | null> {
    return this.call('checkpoints.load', async () => {
      assertValidKey(checkpointId, 'checkpoint id');
      return this.#decode(await this._load(checkpointId));
    }, checkpointId);
  }

  list(taskId: string): Promise<Checkpoint<TData>[]> {
    return this.call('checkpoints.list', async () => {
      assertValidKey(taskId, 'taskId');
      return (await this._list(taskId)).map((stored) => this.#decode(stored)!);
    }, taskId);
  }

  cleanup(taskId: string, keepCount: number): Promise<void> {
    return this.call('checkpoints.cleanup', () => {
      assertValidKey(taskId, 'taskId');
      assertKeepCount(keepCount);
      return this._cleanup(taskId, keepCount);
    }, taskId);
  }

  deleteAll(taskId: string): Promise<void> {
    return this.call('checkpoints.deleteAll', () => {
      assertValidKey(taskId, 'taskId');
      return this._deleteAll(taskId);
    }, taskId);
  }

  #decode(stored: StoredCheckpoint | null): Checkpoint<TData> | null {
    if (stored === null) return null;
    const { data, estimatedTimeRemaining, ...rest } = stored;
    const checkpoint: Checkpoint<TData> = { ...rest, data: decodeValue(this.#codec, data, `the data of checkpoint "${rest.id}"`) as TData };
    if (estimatedTimeRemaining !== undefined && estimatedTimeRemaining !== null) checkpoint.estimatedTimeRemaining = estimatedTimeRemaining;
    return checkpoint;
  }

  // --- backend operations -------------------------------------------------------------

  /** Inserts the checkpoint unless its id or `(taskId, sequence)` exists (then nothing is written). */
  protected abstract _save(checkpoint: StoredCheckpoint): Promise<'saved' | 'id-exists' | 'sequence-exists'>;
  /**
   * Optional (needed for `onDuplicate: 'replace'`): inserts the checkpoint, or replaces the one
   * with its id, and removes any other checkpoint of its `(taskId, sequence)`, atomically.
   */
  protected _replace?(checkpoint: StoredCheckpoint): Promise<void>;
  protected abstract _load(id: string): Promise<StoredCheckpoint | null>;
  /** The checkpoint of the task with the highest sequence. */
  protected abstract _loadLatest(taskId: string): Promise<StoredCheckpoint | null>;
  /** Ascending by sequence. */
  protected abstract _list(taskId: string): Promise<StoredCheckpoint[]>;
  /** Keeps the `keepCount` highest sequences of the task, removes the rest. */
  protected abstract _cleanup(taskId: string, keepCount: number): Promise<void>;
  protected abstract _deleteAll(taskId: string): Promise<void>;
}

/** Throws `E_INVALID_KEY` / `E_INVALID_VALUE` unless `checkpoint` has the documented shape (data is checked by the codec). */
export function assertCheckpoint(checkpoint: unknown): asserts checkpoint is Checkpoint<unknown> {
  if (checkpoint === null || typeof checkpoint !== 'object' || Array.isArray(checkpoint)) {
    throw new StowageError('E_INVALID_VALUE', `checkpoint must be an object, got ${describeType(checkpoint)}`);
  }
  const { id, taskId, sequence, timestamp, progress, estimatedTimeRemaining } = checkpoint as Checkpoint<unknown>;
  assertValidKey(id, 'checkpoint id');
  assertValidKey(taskId, 'taskId');
  if (!Number.isSafeInteger(sequence) || sequence < 0) {
    throw new StowageError('E_INVALID_VALUE', `sequence must be a non-negative integer, got ${describeValue(sequence)}`);
  }
  for (const [field, value] of Object.entries({ timestamp, progress })) {
    if (!Number.isFinite(value)) {
      throw new StowageError('E_INVALID_VALUE', `${field} must be a finite number, got ${describeValue(value)}`);
    }
  }
  if (estimatedTimeRemaining !== undefined && !Number.isFinite(estimatedTimeRemaining)) {
    throw new StowageError(
      'E_INVALID_VALUE',
      `estimatedTimeRemaining must be a finite number or absent, got ${describeValue(estimatedTimeRemaining)}`,
    );
  }
}

/** Throws `E_INVALID_OPTION` unless `keepCount` is a non-negative integer. */
export function assertKeepCount(keepCount: unknown): asserts keepCount is number {
  if (!Number.isSafeInteger(keepCount) || (keepCount as number) < 0) {
    throw new StowageError('E_INVALID_OPTION', `keepCount must be a non-negative integer, got ${describeValue(keepCount)}`);
  }
}
