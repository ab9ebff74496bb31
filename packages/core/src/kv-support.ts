import { StowageError } from './errors.js';
import { assertOptionalDuration, assertValidKey, assertValidStringValue, describeType } from './keys.js';
import type { KeyValueSetOptions, KeyValueWrite } from './contracts/kv.js';

/** Validates `set(key, value, { ttl? })` options; returns the ttl. */
export function ttlOfSetOptions(options: KeyValueSetOptions | undefined): number | undefined {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new StowageError('E_INVALID_OPTION', `options must be an object, got ${describeType(options)}`);
  }
  assertOptionalDuration(options?.ttl);
  return options?.ttl;
}

export type KeyValueWrites = Map<string, { value: string; ttl: number | undefined }>;

/**
 * Validates a whole `setMany` batch before anything is written (all or nothing). A key that
 * appears twice keeps its last value, in the position of its last write.
 */
export function parseKeyValueWrites(entries: readonly KeyValueWrite[]): KeyValueWrites {
  if (!Array.isArray(entries)) {
    throw new StowageError('E_INVALID_VALUE', `setMany needs an array, got ${describeType(entries)}`);
  }
  const writes: KeyValueWrites = new Map();
  for (const entry of entries as readonly unknown[]) {
    if (entry === null || typeof entry !== 'object') {
      throw new StowageError('E_INVALID_VALUE', `setMany entries must be objects, got ${describeType(entry)}`);
    }
    const { key, value, ttl } = entry as KeyValueWrite;
    assertValidKey(key);
    assertValidStringValue(value);
    assertOptionalDuration(ttl);
    writes.delete(key);
    writes.set(key, { value, ttl });
  }
  return writes;
}

/**
 * Runs at most one `load` per key at a time in this process; concurrent callers for the
 * same key share its promise (the cache's `getOrSet`).
 */
export class SingleFlight<T> {
  readonly #running = new Map<string, Promise<T>>();

  run(key: string, load: () => Promise<T>): Promise<T> {
    const running = this.#running.get(key);
    if (running) return running;
    const started = load().finally(() => this.#running.delete(key));
    this.#running.set(key, started);
    return started;
  }
}
