import type { Capabilities } from '../capabilities.js';
import type { Checkpoint, CheckpointStore } from '../contracts/checkpoints.js';
import { StowageError } from '../errors.js';
import { assertCodec, encodeValue, jsonCodec, type Codec, type JsonValue } from '../json.js';
import { assertValidKey } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import { assertCheckpoint, assertKeepCount } from '../resilience-support.js';
import { MEMORY_CAPABILITIES, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export interface MemoryCheckpointStoreOptions extends MemoryOptions {
  /** How checkpoints (with their `data`) become text. Default: strict JSON. */
  codec?: Codec;
}

/** Task checkpoints in process memory, unique by id and by `(taskId, sequence)`. */
export class MemoryCheckpointStore<TData = JsonValue> implements CheckpointStore<TData> {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #codec: Codec;
  readonly #lifecycle = new Lifecycle('MemoryCheckpointStore');

  constructor(options: MemoryCheckpointStoreOptions = {}) {
    const { storage } = resolveMemoryOptions(options);
    this.#storage = storage;
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
  }

  async save(checkpoint: Checkpoint<TData>): Promise<void> {
    this.#lifecycle.assertOpen();
    assertCheckpoint(checkpoint);
    const { id, taskId, sequence, timestamp, progress, data, estimatedTimeRemaining } = checkpoint;
    const stored: Checkpoint<TData> = { id, taskId, sequence, timestamp, progress, data };
    if (estimatedTimeRemaining !== undefined) stored.estimatedTimeRemaining = estimatedTimeRemaining;
    const text = encodeValue(this.#codec, stored, 'checkpoint');

    const bySequence = this.#storage.checkpointsByTask.get(taskId) ?? new Map<number, string>();
    if (this.#storage.checkpoints.has(id)) {
      throw new StowageError('E_VERSION_CONFLICT', `checkpoint "${id}" already exists`);
    }
    if (bySequence.has(sequence)) {
      throw new StowageError('E_VERSION_CONFLICT', `task "${taskId}" already has a checkpoint with sequence ${sequence}`);
    }
    bySequence.set(sequence, id);
    this.#storage.checkpointsByTask.set(taskId, bySequence);
    this.#storage.checkpoints.set(id, { id, taskId, sequence, text });
  }

  async loadLatest(taskId: string): Promise<Checkpoint<TData> | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    const ids = this.#idsInOrder(taskId);
    return ids.length === 0 ? null : this.#decode(ids.at(-1)!);
  }

  async load(checkpointId: string): Promise<Checkpoint<TData> | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(checkpointId, 'checkpoint id');
    return this.#storage.checkpoints.has(checkpointId) ? this.#decode(checkpointId) : null;
  }

  async list(taskId: string): Promise<Checkpoint<TData>[]> {
    this.#lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    return this.#idsInOrder(taskId).map((id) => this.#decode(id));
  }

  async cleanup(taskId: string, keepCount: number): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    assertKeepCount(keepCount);
    const ids = this.#idsInOrder(taskId);
    for (const id of ids.slice(0, Math.max(0, ids.length - keepCount))) this.#remove(id);
  }

  async deleteAll(taskId: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    for (const id of this.#idsInOrder(taskId)) this.#remove(id);
  }

  close(): Promise<void> {
    return this.#lifecycle.close();
  }

  #idsInOrder(taskId: string): string[] {
    const bySequence = this.#storage.checkpointsByTask.get(taskId);
    if (!bySequence) return [];
    return [...bySequence].sort(([a], [b]) => a - b).map(([, id]) => id);
  }

  #decode(id: string): Checkpoint<TData> {
    return this.#codec.decode(this.#storage.checkpoints.get(id)!.text) as Checkpoint<TData>;
  }

  #remove(id: string): void {
    const record = this.#storage.checkpoints.get(id);
    if (!record) return;
    this.#storage.checkpoints.delete(id);
    const bySequence = this.#storage.checkpointsByTask.get(record.taskId);
    bySequence?.delete(record.sequence);
    if (bySequence?.size === 0) this.#storage.checkpointsByTask.delete(record.taskId);
  }
}
