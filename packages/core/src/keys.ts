import { createHash } from 'node:crypto';
import { StowageError } from './errors.js';

/** Keys are non-empty strings of at most this many UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024;

const encoder = new TextEncoder();

export function utf8ByteLength(value: string): number {
  return encoder.encode(value).length;
}

/**
 * Throws `E_INVALID_KEY` unless `key` is a non-empty, well-formed string of at most
 * {@link MAX_KEY_BYTES} UTF-8 bytes. Lone surrogates are rejected because no database
 * stores them exactly.
 */
export function assertValidKey(key: unknown, what = 'key'): asserts key is string {
  if (typeof key !== 'string') {
    throw new StowageError('E_INVALID_KEY', `${what} must be a string, got ${describeType(key)}`);
  }
  if (key.length === 0) {
    throw new StowageError('E_INVALID_KEY', `${what} must not be empty`);
  }
  if (!key.isWellFormed()) {
    throw new StowageError('E_INVALID_KEY', `${what} contains a lone surrogate`);
  }
  // A UTF-16 string never encodes to more than 3 bytes per code unit, so short keys skip encoding.
  if (key.length * 3 > MAX_KEY_BYTES && utf8ByteLength(key) > MAX_KEY_BYTES) {
    throw new StowageError('E_INVALID_KEY', `${what} is longer than ${MAX_KEY_BYTES} UTF-8 bytes`);
  }
}

/** `'#'` and a base64url SHA-256: what {@link fitKey} puts after a long key's start. */
const HASH_SUFFIX_BYTES = 1 + 43;

/**
 * A key as the layers for clients that swallow a store's errors keep it: awaitly's
 * `durable.run` (snapshot ids, its `idem:<key>` records) and go-go-scope (idempotency and
 * cache keys) take keys of any length from their own adapters (a URL as the key), and a key
 * refused there would silently turn durability or idempotency off. A key within
 * {@link MAX_KEY_BYTES} is kept as it is; a longer one becomes its first 980 bytes (whole
 * characters), `'#'`, and the base64url SHA-256 of the whole key: still readable, the same
 * for the same key in every process, and distinct for distinct keys. Listings show that
 * stored form. Anything that is not a well-formed string comes back as it is, to be refused
 * by {@link assertValidKey}.
 */
export function fitKey<T>(key: T): T | string {
  if (typeof key !== 'string' || key.length * 3 <= MAX_KEY_BYTES || utf8ByteLength(key) <= MAX_KEY_BYTES || !key.isWellFormed()) return key;
  let start = '';
  let bytes = 0;
  for (const character of key) {
    const size = utf8ByteLength(character);
    if (bytes + size > MAX_KEY_BYTES - HASH_SUFFIX_BYTES) break;
    start += character;
    bytes += size;
  }
  return `${start}#${createHash('sha256').update(key).digest('base64url')}`;
}

export function assertValidKeys(keys: unknown, what = 'keys'): asserts keys is readonly string[] {
  if (!Array.isArray(keys)) {
    throw new StowageError('E_INVALID_KEY', `${what} must be an array, got ${describeType(keys)}`);
  }
  for (const key of keys) assertValidKey(key);
}

/** Throws `E_INVALID_VALUE` unless `value` is a well-formed string. */
export function assertValidStringValue(value: unknown, what = 'value'): asserts value is string {
  if (typeof value !== 'string') {
    throw new StowageError('E_INVALID_VALUE', `${what} must be a string, got ${describeType(value)}`);
  }
  if (!value.isWellFormed()) {
    throw new StowageError('E_INVALID_VALUE', `${what} contains a lone surrogate`);
  }
}

/**
 * The longest duration stowage accepts: 100 years. Longer ones would put expiry times past
 * what a JavaScript `Date` can hold, and some backends would then lose the write.
 */
export const MAX_DURATION_MS = 100 * 365.25 * 24 * 60 * 60 * 1000;

/** An owner token: stored as it is (PostgreSQL `text` holds no U+0000), so any other string up to 256 characters. */
export function assertValidOwner(owner: unknown, what = 'owner'): asserts owner is string {
  if (typeof owner !== 'string' || owner.length === 0 || owner.length > 256 || !owner.isWellFormed() || owner.includes('\0')) {
    throw new StowageError('E_INVALID_OPTION', `${what} must be a non-empty, well-formed string of at most 256 characters without U+0000`);
  }
}

/**
 * Throws `E_INVALID_OPTION` unless `ms` is a positive integer number of milliseconds, at most
 * {@link MAX_DURATION_MS}. Durations are milliseconds everywhere in stowage.
 */
export function assertValidDuration(ms: unknown, what = 'ttl'): asserts ms is number {
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms <= 0 || ms > MAX_DURATION_MS) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must be a positive integer number of milliseconds up to ${MAX_DURATION_MS} (100 years), got ${describeValue(ms)}`,
    );
  }
}

/** Like {@link assertValidDuration} but `undefined` (no expiry) is allowed. */
export function assertOptionalDuration(ms: unknown, what = 'ttl'): asserts ms is number | undefined {
  if (ms !== undefined) assertValidDuration(ms, what);
}

export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  return describeType(value);
}

/**
 * Orders keys by Unicode code point, which is also UTF-8 byte order: the order every
 * adapter lists keys in (Postgres `COLLATE "C"`, MongoDB's binary string comparison).
 * JavaScript's default `<` compares UTF-16 code units and differs for characters above U+FFFF.
 */
export function compareKeys(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xSurrogate = x >= 0xd800 && x <= 0xdfff;
    const ySurrogate = y >= 0xd800 && y <= 0xdfff;
    // A surrogate stands for a code point above U+FFFF, so it sorts after any other code unit.
    if (xSurrogate !== ySurrogate) return xSurrogate ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}
