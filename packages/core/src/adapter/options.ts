import type { KeyValueSetOptions, KeyValueWrite } from '../contracts/kv.js';
import { StowageError } from '../errors.js';
import {
  MAX_KEY_BYTES,
  assertOptionalDuration,
  assertValidKey,
  assertValidStringValue,
  compareKeys,
  describeType,
  describeValue,
  utf8ByteLength,
} from '../keys.js';

/*
 * Argument rules shared by several contracts, so that every adapter rejects the same input
 * with the same code.
 */

/** Throws `E_INVALID_OPTION` unless `options` is an object or `undefined`. */
export function assertOptionsObject(options: unknown, what = 'options'): asserts options is object | undefined {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new StowageError('E_INVALID_OPTION', `${what} must be an object, got ${describeType(options)}`);
  }
}

/** Validates `set(key, value, { ttl? })` options; returns the ttl. */
export function ttlOfSetOptions(options: KeyValueSetOptions | undefined): number | undefined {
  assertOptionsObject(options);
  assertOptionalDuration(options?.ttl);
  return options?.ttl;
}

export type KeyValueWrites = Map<string, { value: string; ttl: number | undefined }>;

/**
 * Validates a whole `setMany` batch before anything is written (all or nothing). A key that
 * appears twice keeps its last value.
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
    writes.set(key, { value, ttl });
  }
  return writes;
}

/** Throws `E_INVALID_OPTION` unless `version` is a positive safe integer, `null` or `undefined`. */
export function assertExpectedVersion(version: unknown): asserts version is number | null | undefined {
  if (version === undefined || version === null) return;
  if (!Number.isSafeInteger(version) || (version as number) < 1) {
    throw new StowageError('E_INVALID_OPTION', `expectedVersion must be a positive integer or null, got ${describeValue(version)}`);
  }
}

/**
 * Throws `E_INVALID_OPTION` unless `prefix` can name a namespace: a well-formed string (lone
 * surrogates would be stored as U+FFFD by some databases, merging two namespaces) without
 * U+0000, of at most {@link MAX_KEY_BYTES} UTF-8 bytes. `''` is the namespace of stores
 * created without a prefix.
 */
export function assertValidPrefix(prefix: unknown, what = 'prefix'): asserts prefix is string {
  if (typeof prefix !== 'string') {
    throw new StowageError('E_INVALID_OPTION', `${what} must be a string, got ${describeType(prefix)}`);
  }
  if (!prefix.isWellFormed()) throw new StowageError('E_INVALID_OPTION', `${what} contains a lone surrogate`);
  // Keeps "prefix U+0000 id" unambiguous, for backends that store the two in one string.
  if (prefix.includes('\u0000')) throw new StowageError('E_INVALID_OPTION', `${what} contains U+0000`);
  if (prefix.length * 3 > MAX_KEY_BYTES && utf8ByteLength(prefix) > MAX_KEY_BYTES) {
    throw new StowageError('E_INVALID_OPTION', `${what} is longer than ${MAX_KEY_BYTES} UTF-8 bytes`);
  }
}

/** 0001-01-01 and 9999-12-31T23:59:59.999Z, in epoch ms. */
const FIRST_STORABLE_TIME = -62_135_596_800_000;
const LAST_STORABLE_TIME = 253_402_300_799_999;

/**
 * True for a valid date that every backend can compare with its stored times: years 1 to
 * 9999. A cursor's time is one a server stored (or the epoch, for rows of the seeds' layouts
 * with none); JavaScript dates reach ±275,760 years, PostgreSQL's timestamps only 4713 BC, so a
 * forged cursor outside this range would reach the database as an out-of-range value.
 */
export function isStorableTime(date: unknown): date is Date {
  if (!(date instanceof Date)) return false;
  const ms = date.getTime();
  return ms >= FIRST_STORABLE_TIME && ms <= LAST_STORABLE_TIME;
}

/** Throws `E_INVALID_OPTION` unless `value` is a boolean or `undefined`; returns it or `fallback`. */
export function booleanOption(value: unknown, what: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new StowageError('E_INVALID_OPTION', `${what} must be a boolean, got ${describeType(value)}`);
  return value;
}

export const DEFAULT_SCAN_PAGE = 1000;
export const MAX_SCAN_PAGE = 10_000;

/** Validates `scan(…, { pageSize })` options; returns the page size. */
export function pageSizeOf(options: { pageSize?: number } | undefined): number {
  assertOptionsObject(options, 'scan options');
  const pageSize = options?.pageSize ?? DEFAULT_SCAN_PAGE;
  if (!Number.isSafeInteger(pageSize) || pageSize < 1 || pageSize > MAX_SCAN_PAGE) {
    throw new StowageError('E_INVALID_OPTION', `pageSize must be an integer from 1 to ${MAX_SCAN_PAGE}, got ${describeValue(pageSize)}`);
  }
  return pageSize;
}

/** The items of `sorted` (ascending by `keyOf`, code-point order) after `after`, at most `limit`: the page a backend without a range query hands back. */
export function pageAfter<T>(sorted: readonly T[], keyOf: (item: T) => string, after: string | null, limit: number): T[] {
  let start = 0;
  if (after !== null) {
    let high = sorted.length;
    while (start < high) {
      const middle = (start + high) >>> 1;
      if (compareKeys(keyOf(sorted[middle]!), after) <= 0) start = middle + 1;
      else high = middle;
    }
  }
  return sorted.slice(start, start + limit);
}
