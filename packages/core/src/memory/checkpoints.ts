import { CheckpointStoreBase, type CheckpointStoreBaseOptions, type StoredCheckpoint } from '../adapter/checkpoints.js';
import type { JsonValue } from '../json.js';
import { MEMORY_HANDLE, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export interface MemoryCheckpointStoreOptions extends MemoryOptions, CheckpointStoreBaseOptions {}

/** Task checkpoints in process memory, unique by id and by `(taskId, sequence)`. */
export class MemoryCheckpointStore<TData = JsonValue> extends CheckpointStoreBase<TData> {
  readonly #storage: MemoryStorage;

  constructor(options: MemoryCheckpointStoreOptions = {}) {
    super({ name: 'MemoryCheckpointStore', system: 'memory' }, MEMORY_HANDLE, options);
    this.#storage = resolveMemoryOptions(options).storage;
  }

  protected async _save(checkpoint: StoredCheckpoint): Promise<'saved' | 'id-exists' | 'sequence-exists'> {
    const { checkpoints, checkpointsByTask } = this.#storage;
    if (checkpoints.has(checkpoint.id)) return 'id-exists';
    const bySequence = checkpointsByTask.get(checkpoint.taskId) ?? new Map<number, string>();
    if (bySequence.has(checkpoint.sequence)) return 'sequence-exists';
    bySequence.set(checkpoint.sequence, checkpoint.id);
    checkpointsByTask.set(checkpoint.taskId, bySequence);
    checkpoints.set(checkpoint.id, { ...checkpoint });
    return 'saved';
  }

  protected override async _replace(checkpoint: StoredCheckpoint): Promise<void> {
    this.#remove(checkpoint.id);
    const other = this.#storage.checkpointsByTask.get(checkpoint.taskId)?.get(checkpoint.sequence);
    if (other !== undefined) this.#remove(other);
    await this._save(checkpoint);
  }

  protected async _load(id: string): Promise<StoredCheckpoint | null> {
    const stored = this.#storage.checkpoints.get(id);
    return stored ? { ...stored } : null;
  }

  protected async _loadLatest(taskId: string): Promise<StoredCheckpoint | null> {
    return (await this._list(taskId)).at(-1) ?? null;
  }

  protected async _list(taskId: string): Promise<StoredCheckpoint[]> {
    return this.#idsInOrder(taskId).map((id) => ({ ...this.#storage.checkpoints.get(id)! }));
  }

  protected async _cleanup(taskId: string, keepCount: number): Promise<void> {
    const ids = this.#idsInOrder(taskId);
    for (const id of ids.slice(0, Math.max(0, ids.length - keepCount))) this.#remove(id);
  }

  protected async _deleteAll(taskId: string): Promise<void> {
    for (const id of this.#idsInOrder(taskId)) this.#remove(id);
  }

  #idsInOrder(taskId: string): string[] {
    const bySequence = this.#storage.checkpointsByTask.get(taskId);
    if (!bySequence) return [];
    return [...bySequence].sort(([a], [b]) => a - b).map(([, id]) => id);
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
