import { describe, expect, it } from 'vitest';
import {
  MAX_DURATION_MS,
  MAX_KEY_BYTES,
  assertOptionalDuration,
  assertValidDuration,
  assertValidKey,
  assertValidKeys,
  assertValidStringValue,
  compareKeys,
  utf8ByteLength,
} from '../src/keys.js';

const code = (fn: () => void) => {
  try {
    fn();
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code;
  }
};

describe('assertValidKey', () => {
  it('accepts non-empty well-formed strings up to 1024 UTF-8 bytes', () => {
    for (const key of ['a', ' ', '\u0000', 'k'.repeat(1024), '€'.repeat(341) + 'a', '😀'.repeat(256), '%_*?\\']) {
      expect(code(() => assertValidKey(key)), key.slice(0, 8)).toBe('ok');
    }
    expect(MAX_KEY_BYTES).toBe(1024);
  });

  it('rejects everything else with E_INVALID_KEY', () => {
    for (const key of ['', 'k'.repeat(1025), '€'.repeat(342), '😀'.repeat(256) + 'a', 'a\ud800', '\udfff', 1, null, undefined, {}, ['a']]) {
      expect(code(() => assertValidKey(key)), String(key).slice(0, 8)).toBe('E_INVALID_KEY');
    }
  });

  it('names the argument in the message', () => {
    expect(() => assertValidKey('', 'snapshot id')).toThrow(/snapshot id/);
  });

  it('assertValidKeys checks the array and each key', () => {
    expect(code(() => assertValidKeys(['a', 'b']))).toBe('ok');
    expect(code(() => assertValidKeys('a'))).toBe('E_INVALID_KEY');
    expect(code(() => assertValidKeys(['a', '']))).toBe('E_INVALID_KEY');
  });
});

describe('values and durations', () => {
  it('string values: any well-formed string, including empty and NUL', () => {
    for (const value of ['', '\u0000', 'x'.repeat(100_000)]) expect(code(() => assertValidStringValue(value))).toBe('ok');
    for (const value of [1, null, undefined, 'a\ud800']) expect(code(() => assertValidStringValue(value))).toBe('E_INVALID_VALUE');
  });

  it('durations: positive safe integers up to 100 years only', () => {
    for (const ms of [1, 1000, MAX_DURATION_MS]) expect(code(() => assertValidDuration(ms))).toBe('ok');
    for (const ms of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, MAX_DURATION_MS + 1, Number.MAX_SAFE_INTEGER, '1', null, undefined]) {
      expect(code(() => assertValidDuration(ms)), String(ms)).toBe('E_INVALID_OPTION');
    }
    expect(code(() => assertOptionalDuration(undefined))).toBe('ok');
    expect(code(() => assertOptionalDuration(0))).toBe('E_INVALID_OPTION');
  });

  it('utf8ByteLength counts bytes', () => {
    expect(utf8ByteLength('a€😀')).toBe(1 + 3 + 4);
  });
});

describe('compareKeys', () => {
  it('orders by code point, which is UTF-8 byte order', () => {
    const keys = ['b', 'a', 'B', '😀', '\uffff', 'é', 'ab', '', 'a\u0000'];
    const sorted = [...keys].sort(compareKeys);
    expect(sorted).toEqual(['', 'B', 'a', 'a\u0000', 'ab', 'b', 'é', '\uffff', '😀']);
    const byBytes = [...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
    expect(sorted).toEqual(byBytes);
  });
});
