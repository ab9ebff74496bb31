import type { Clock } from '../clock.js';
import type { KeyValueEntry, KeyValueEntryInfo } from '../contracts/kv.js';
import { KeyValueStoreBase, type KeyValueStoreBaseOptions, type KeyValueWriteOp } from '../adapter/kv.js';
import type { Glob } from '../glob.js';
import { compareKeys } from '../keys.js';
import {
  MEMORY_HANDLE,
  isLive,
  resolveMemoryOptions,
  type KeyValueRecord,
  type MemoryOptions,
  type MemoryStorage,
} from './storage.js';

export interface MemoryKeyValueStoreOptions extends MemoryOptions, KeyValueStoreBaseOptions {}

/** {@link KeyValueStore} in process memory, with the same semantics as the database adapters. */
export class MemoryKeyValueStore extends KeyValueStoreBase {
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;

  constructor(options?: MemoryKeyValueStoreOptions) {
    const { storage, clock } = resolveMemoryOptions(options);
    super({ name: 'MemoryKeyValueStore', system: 'memory' }, MEMORY_HANDLE, options);
    this.#storage = storage;
    this.#clock = clock;
  }

  protected override async _get(key: string): Promise<string | null> {
    return this.#live(key, this.#clock.now())?.value ?? null;
  }

  protected async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const now = this.#clock.now();
    return keys.map((key) => this.#live(key, now)?.value ?? null);
  }

  protected override async _existsMany(keys: readonly string[]): Promise<boolean[]> {
    const now = this.#clock.now();
    return keys.map((key) => this.#live(key, now) !== null);
  }

  protected async _setMany(writes: readonly KeyValueWriteOp[]): Promise<void> {
    const now = this.#clock.now();
    for (const { key, value, ttl } of writes) this.#write(key, value, ttl, now);
  }

  protected async _deleteMany(keys: readonly string[]): Promise<number> {
    const now = this.#clock.now();
    let removed = 0;
    for (const key of keys) {
      if (this.#live(key, now) !== null) removed++;
      this.#storage.kv.delete(key);
    }
    return removed;
  }

  protected override async _deleteEach(keys: readonly string[]): Promise<boolean[]> {
    const now = this.#clock.now();
    return keys.map((key) => {
      const live = this.#live(key, now) !== null;
      this.#storage.kv.delete(key);
      return live;
    });
  }

  protected async _getEntry(key: string): Promise<KeyValueEntry | null> {
    const record = this.#live(key, this.#clock.now());
    return record === null ? null : { key, value: record.value, ...info(record) };
  }

  protected async _entries(glob: Glob): Promise<KeyValueEntryInfo[]> {
    const now = this.#clock.now();
    return [...this.#storage.kv]
      .filter(([key, record]) => isLive(record.expiresAt, now) && glob.matches(key))
      .sort(([a], [b]) => compareKeys(a, b))
      .map(([key, record]) => ({ key, ...info(record) }));
  }

  protected async _compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    ttl: number | undefined,
  ): Promise<number | null> {
    const now = this.#clock.now();
    if ((this.#live(key, now)?.version ?? null) !== expectedVersion) return null;
    return this.#write(key, value, ttl, now);
  }

  protected async _clearExpired(): Promise<number> {
    const now = this.#clock.now();
    let removed = 0;
    for (const [key, record] of this.#storage.kv) {
      if (!isLive(record.expiresAt, now)) {
        this.#storage.kv.delete(key);
        removed++;
      }
    }
    return removed;
  }

  #live(key: string, now: number): KeyValueRecord | null {
    const record = this.#storage.kv.get(key);
    return record && isLive(record.expiresAt, now) ? record : null;
  }

  #write(key: string, value: string, ttl: number | undefined, now: number): number {
    const version = this.#storage.nextVersion();
    this.#storage.kv.set(key, { value, version, updatedAt: now, expiresAt: ttl === undefined ? null : now + ttl });
    this.#storage.noteWrite(this.#storage.kv, now);
    return version;
  }
}

function info(record: KeyValueRecord): Omit<KeyValueEntryInfo, 'key'> {
  return {
    version: record.version,
    updatedAt: new Date(record.updatedAt),
    expiresAt: record.expiresAt === null ? null : new Date(record.expiresAt),
  };
}
