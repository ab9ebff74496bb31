import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import type {
  KeyValueEntry,
  KeyValueEntryInfo,
  KeyValueSetOptions,
  KeyValueStore,
  KeyValueWrite,
} from '../contracts/kv.js';
import { StowageError } from '../errors.js';
import { globMatcher } from '../glob.js';
import {
  assertValidKey,
  assertValidKeys,
  assertValidStringValue,
  compareKeys,
} from '../keys.js';
import { parseKeyValueWrites, ttlOfSetOptions } from '../kv-support.js';
import { Lifecycle } from '../lifecycle.js';
import {
  MEMORY_CAPABILITIES,
  isLive,
  resolveMemoryOptions,
  type KeyValueRecord,
  type MemoryOptions,
  type MemoryStorage,
} from './storage.js';

export type MemoryKeyValueStoreOptions = MemoryOptions;

/** {@link KeyValueStore} in process memory, with the same semantics as the database adapters. */
export class MemoryKeyValueStore implements KeyValueStore {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #lifecycle = new Lifecycle('MemoryKeyValueStore');

  constructor(options?: MemoryKeyValueStoreOptions) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
  }

  async get(key: string): Promise<string | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    return this.#live(key, this.#clock.now())?.value ?? null;
  }

  async set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertValidStringValue(value);
    const ttl = ttlOfSetOptions(options);
    this.#write(key, value, ttl, this.#clock.now());
  }

  async delete(key: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const live = this.#live(key, this.#clock.now()) !== null;
    this.#storage.kv.delete(key);
    return live;
  }

  async exists(key: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    return this.#live(key, this.#clock.now()) !== null;
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.#lifecycle.assertOpen();
    return this.#matching(pattern).map(([key]) => key);
  }

  async getMany(keys: readonly string[]): Promise<(string | null)[]> {
    this.#lifecycle.assertOpen();
    assertValidKeys(keys);
    const now = this.#clock.now();
    return keys.map((key) => this.#live(key, now)?.value ?? null);
  }

  async setMany(entries: readonly KeyValueWrite[]): Promise<void> {
    this.#lifecycle.assertOpen();
    const writes = parseKeyValueWrites(entries);
    const now = this.#clock.now();
    for (const [key, { value, ttl }] of writes) this.#write(key, value, ttl, now);
  }

  async deleteMany(keys: readonly string[]): Promise<number> {
    this.#lifecycle.assertOpen();
    assertValidKeys(keys);
    const now = this.#clock.now();
    let removed = 0;
    for (const key of new Set(keys)) {
      if (this.#live(key, now) !== null) removed++;
      this.#storage.kv.delete(key);
    }
    return removed;
  }

  async getEntry(key: string): Promise<KeyValueEntry | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const record = this.#live(key, this.#clock.now());
    return record === null ? null : { key, value: record.value, ...info(record) };
  }

  async entries(pattern = '*'): Promise<KeyValueEntryInfo[]> {
    this.#lifecycle.assertOpen();
    return this.#matching(pattern).map(([key, record]) => ({ key, ...info(record) }));
  }

  async compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    options?: KeyValueSetOptions,
  ): Promise<number> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertValidStringValue(value);
    if (expectedVersion !== null && (!Number.isSafeInteger(expectedVersion) || expectedVersion < 1)) {
      throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a positive integer or null');
    }
    const ttl = ttlOfSetOptions(options);
    const now = this.#clock.now();
    const current = this.#live(key, now);
    const currentVersion = current?.version ?? null;
    if (currentVersion !== expectedVersion) {
      throw new StowageError(
        'E_VERSION_CONFLICT',
        `"${key}" is at version ${currentVersion ?? 'absent'}, expected ${expectedVersion ?? 'absent'}`,
      );
    }
    return this.#write(key, value, ttl, now);
  }

  async clearExpired(): Promise<number> {
    this.#lifecycle.assertOpen();
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

  close(): Promise<void> {
    return this.#lifecycle.close();
  }

  #live(key: string, now: number): KeyValueRecord | null {
    const record = this.#storage.kv.get(key);
    return record && isLive(record.expiresAt, now) ? record : null;
  }

  #write(key: string, value: string, ttl: number | undefined, now: number): number {
    const version = (this.#live(key, now)?.version ?? 0) + 1;
    this.#storage.kv.set(key, { value, version, updatedAt: now, expiresAt: ttl === undefined ? null : now + ttl });
    this.#storage.noteWrite(this.#storage.kv, now);
    return version;
  }

  #matching(pattern: string): [string, KeyValueRecord][] {
    const matches = globMatcher(pattern);
    const now = this.#clock.now();
    return [...this.#storage.kv]
      .filter(([key, record]) => isLive(record.expiresAt, now) && matches(key))
      .sort(([a], [b]) => compareKeys(a, b));
  }
}


function info(record: KeyValueRecord): Omit<KeyValueEntryInfo, 'key'> {
  return {
    version: record.version,
    updatedAt: new Date(record.updatedAt),
    expiresAt: record.expiresAt === null ? null : new Date(record.expiresAt),
  };
}
