import {
  StowageError,
  assertCheckpoint,
  assertCodec,
  assertKeepCount,
  assertValidKey,
  encodeValue,
  jsonCodec,
  type Checkpoint,
  type CheckpointStore,
  type Codec,
  type JsonValue,
} from '@stowage/core';
import { isDuplicateKeyError } from './errors.js';
import { MongoResource, type MongoStoreOptions } from './resource.js';

/**
 * One checkpoint (seed 001's shape, `_id` = checkpoint id). `data` is codec text (strict JSON by
 * default), so any JSON value round-trips exactly; it may be several MB (BSON's limit is 16 MB).
 */
export interface CheckpointDocument {
  _id: string;
  taskId: string;
  sequence: number;
  timestamp: number;
  progress: number;
  data: string;
  estimatedTimeRemaining?: number;
}

export interface MongoCheckpointStoreOptions extends MongoStoreOptions {
  /** How `data` becomes text. Default: strict JSON. */
  codec?: Codec;
}

/**
 * {@link CheckpointStore} on one collection (default `stowage_checkpoints`) with a unique
 * `{ taskId: 1, sequence: 1 }` index: saving an existing id or `(taskId, sequence)` is a clear
 * `E_VERSION_CONFLICT`, never an overwrite.
 */
export class MongoCheckpointStore<TData = JsonValue>
  extends MongoResource<CheckpointDocument>
  implements CheckpointStore<TData>
{
  readonly #codec: Codec;

  constructor(options: MongoCheckpointStoreOptions) {
    super('MongoCheckpointStore', 'checkpoints', options);
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
  }

  async save(checkpoint: Checkpoint<TData>): Promise<void> {
    this.lifecycle.assertOpen();
    assertCheckpoint(checkpoint);
    const { id, taskId, sequence, timestamp, progress, data, estimatedTimeRemaining } = checkpoint;
    const document: CheckpointDocument = { _id: id, taskId, sequence, timestamp, progress, data: encodeValue(this.#codec, data, 'data') };
    if (estimatedTimeRemaining !== undefined) document.estimatedTimeRemaining = estimatedTimeRemaining;
    await this.run(async ({ collection }) => {
      try {
        await collection.insertOne(document);
      } catch (error) {
        if (!isDuplicateKeyError(error)) throw error;
        throw new StowageError(
          'E_VERSION_CONFLICT',
          `checkpoint "${id}" or sequence ${sequence} of task "${taskId}" already exists`,
          { cause: error },
        );
      }
    });
  }

  async loadLatest(taskId: string): Promise<Checkpoint<TData> | null> {
    this.lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    return this.run(async ({ collection }) => {
      const document = await collection.findOne({ taskId }, { sort: { sequence: -1 } });
      return document && this.#toCheckpoint(document);
    });
  }

  async load(checkpointId: string): Promise<Checkpoint<TData> | null> {
    this.lifecycle.assertOpen();
    assertValidKey(checkpointId, 'checkpoint id');
    return this.run(async ({ collection }) => {
      const document = await collection.findOne({ _id: checkpointId });
      return document && this.#toCheckpoint(document);
    });
  }

  async list(taskId: string): Promise<Checkpoint<TData>[]> {
    this.lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    return this.run(async ({ collection }) => {
      const documents = await collection.find({ taskId }).sort({ sequence: 1 }).toArray();
      return documents.map((document) => this.#toCheckpoint(document));
    });
  }

  /**
   * Two commands (MongoDB deletes cannot sort or skip): find the highest sequence to remove,
   * then delete it and everything below. A checkpoint saved in between with a higher sequence
   * is kept, so at least `keepCount` remain.
   */
  async cleanup(taskId: string, keepCount: number): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    assertKeepCount(keepCount);
    await this.run(async ({ collection }) => {
      if (keepCount === 0) {
        await collection.deleteMany({ taskId });
        return;
      }
      const [boundary] = await collection
        .find({ taskId }, { projection: { sequence: 1 } })
        .sort({ sequence: -1 })
        .skip(keepCount)
        .limit(1)
        .toArray();
      if (boundary) await collection.deleteMany({ taskId, sequence: { $lte: boundary.sequence } });
    });
  }

  async deleteAll(taskId: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(taskId, 'taskId');
    await this.run(({ collection }) => collection.deleteMany({ taskId }));
  }

  #toCheckpoint(document: CheckpointDocument): Checkpoint<TData> {
    const checkpoint: Checkpoint<TData> = {
      id: document._id,
      taskId: document.taskId,
      sequence: document.sequence,
      timestamp: document.timestamp,
      progress: document.progress,
      data: this.#codec.decode(document.data) as TData,
    };
    if (document.estimatedTimeRemaining !== undefined && document.estimatedTimeRemaining !== null) {
      checkpoint.estimatedTimeRemaining = document.estimatedTimeRemaining;
    }
    return checkpoint;
  }
}
