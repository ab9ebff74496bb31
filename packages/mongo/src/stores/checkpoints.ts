import type { JsonValue } from '@stowage/core';
import { CheckpointStoreBase, type CheckpointStoreBaseOptions, type StoredCheckpoint } from '@stowage/core/adapter';
import { mongoStore, storeDatabase, type StoreDatabase } from '../database.js';
import type { CheckpointDocument } from '../documents.js';
import { assertDocumentSize, duplicateKeyPattern, isDuplicateKeyError } from '../errors.js';
import type { MongoStoreOptions } from '../options.js';

export interface MongoCheckpointStoreOptions extends MongoStoreOptions, CheckpointStoreBaseOptions {}

/**
 * {@link CheckpointStore} on one collection (default `stowage_checkpoints`) with a unique
 * `{ taskId: 1, sequence: 1 }` index (checked at start-up): saving an existing id or
 * `(taskId, sequence)` is a clear `E_VERSION_CONFLICT`, never an overwrite (unless
 * `onDuplicate: 'replace'`, as go-go-scope needs). `data` is the codec's text (strict JSON by
 * default).
 */
export class MongoCheckpointStore<TData = JsonValue> extends mongoStore(CheckpointStoreBase)<TData> {
  readonly #db: StoreDatabase<CheckpointDocument>;

  constructor(options: MongoCheckpointStoreOptions) {
    const db = storeDatabase<CheckpointDocument>(options, { kind: 'checkpoints', name: 'MongoCheckpointStore' });
    super(db.identity, db, options);
    this.#db = db;
  }

  /** This store inside the caller's transaction (see `withTransaction`): same collections, every command with the transaction's session. */
  protected override _bind(session: object): this {
    return new MongoCheckpointStore<TData>(this.#db.viewOptions(session)) as this;
  }

  /**
   * One `update`: an upsert whose filter is the checkpoint's `(taskId, sequence)`, so it inserts
   * only where that task has no checkpoint of that sequence. The command itself refuses a
   * duplicate, not only the unique index, which an administrator can drop (or drop with the
   * collection: the next write creates a new collection, without indexes, until a store starts
   * again); the index decides between two saves of one `(taskId, sequence)` at the same instant.
   * An existing id collides on `_id`. A duplicate key says which unique index refused it
   * (MongoDB names it; otherwise, as when the filter matched, one read tells).
   */
  protected async _save(checkpoint: StoredCheckpoint): Promise<'saved' | 'id-exists' | 'sequence-exists'> {
    const collection = (await this.#db.use()).collection;
    const { id, ...fields } = checkpoint;
    const document: CheckpointDocument = { _id: id, ...fields };
    assertDocumentSize(document, 'the checkpoint');
    try {
      const { upsertedCount } = await collection.updateOne({ taskId: fields.taskId, sequence: fields.sequence }, { $setOnInsert: document }, { upsert: true });
      if (upsertedCount === 1) return 'saved';
    } catch (error) {
      if (!isDuplicateKeyError(error)) throw error;
      const pattern = duplicateKeyPattern(error);
      if (pattern) return '_id' in pattern ? 'id-exists' : 'sequence-exists';
    }
    return (await collection.findOne({ _id: id }, { projection: { _id: 1 } })) ? 'id-exists' : 'sequence-exists';
  }

  /**
   * `onDuplicate: 'replace'` (go-go-scope re-saves a checkpoint): what stands in its way gives
   * way — another checkpoint of the same `(taskId, sequence)` (the unique index holds one), this
   * id under another task — then this id is written over by an upsert on `{ _id, taskId }` (an
   * upsert on a collection sharded on `{ taskId: 1 }` must name the shard key, before MongoDB 7.1).
   */
  protected override async _replace(checkpoint: StoredCheckpoint): Promise<void> {
    const collection = (await this.#db.use()).collection;
    const { id, ...fields } = checkpoint;
    const document: CheckpointDocument = { _id: id, ...fields };
    assertDocumentSize(document, 'the checkpoint');
    const { taskId, sequence } = fields;
    await collection.deleteMany({ $or: [{ taskId, sequence, _id: { $ne: id } }, { _id: id, taskId: { $ne: taskId } }] });
    await collection.replaceOne({ _id: id, taskId }, document, { upsert: true });
  }

  protected async _load(id: string): Promise<StoredCheckpoint | null> {
    return stored(await (await this.#db.use()).collection.findOne({ _id: id }));
  }

  protected async _loadLatest(taskId: string): Promise<StoredCheckpoint | null> {
    return stored(await (await this.#db.use()).collection.findOne({ taskId }, { sort: { sequence: -1 } }));
  }

  protected async _list(taskId: string): Promise<StoredCheckpoint[]> {
    const documents = await (await this.#db.use()).collection.find({ taskId }).sort({ sequence: 1 }).toArray();
    return documents.map((document) => stored(document)!);
  }

  /**
   * Two commands (MongoDB deletes cannot sort or skip): find the highest sequence to remove,
   * then delete it and everything below. A checkpoint saved in between with a higher sequence
   * is kept, so at least `keepCount` remain.
   */
  protected async _cleanup(taskId: string, keepCount: number): Promise<void> {
    const collection = (await this.#db.use()).collection;
    if (keepCount === 0) {
      await collection.deleteMany({ taskId });
      return;
    }
    const [boundary] = await collection.find({ taskId }, { projection: { sequence: 1 } }).sort({ sequence: -1 }).skip(keepCount).limit(1).toArray();
    if (boundary) await collection.deleteMany({ taskId, sequence: { $lte: boundary.sequence } });
  }

  protected async _deleteAll(taskId: string): Promise<void> {
    await (await this.#db.use()).collection.deleteMany({ taskId });
  }
}

function stored(document: CheckpointDocument | null): StoredCheckpoint | null {
  if (document === null) return null;
  const { _id, ...fields } = document;
  return { id: _id, ...fields };
}
