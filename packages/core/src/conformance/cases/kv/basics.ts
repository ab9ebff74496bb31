/**
 * KeyValueStore cases: get, set, exists and delete; values; call order on one key; keys(); hostile,
 * longest and invalid keys.
 */
import { expect } from 'vitest';
import { escapeGlob } from '../../../glob.js';
import { compareKeys } from '../../../keys.js';
import { defineCases } from '../../harness.js';
import { HOSTILE_KEYS, INVALID_KEYS, ONE_MB_STRING, expectReject, parallel, utf8Bytes } from '../../helpers.js';

export const basicCases = defineCases('KeyValueStore', (it) => {
  it('get returns null and exists false for a missing key', async (s) => {
    const kv = await s.kv();
    expect(await kv.get('missing')).toBeNull();
    expect(await kv.exists('missing')).toBe(false);
    expect(await kv.getEntry('missing')).toBeNull();
  });

  it('set then get round-trips; set overwrites', async (s) => {
    const kv = await s.kv();
    await kv.set('a', 'one');
    expect(await kv.get('a')).toBe('one');
    expect(await kv.exists('a')).toBe(true);
    await kv.set('a', 'two');
    expect(await kv.get('a')).toBe('two');
  });

  it('values: empty string, NUL, unicode and 1 MB strings round-trip', async (s) => {
    const kv = await s.kv();
    const values = ['', '\u0000', 'a\u0000b', 'ünïcödé 日本語 😀', '{"json":true}', ' padded \n', ONE_MB_STRING];
    await parallel(values.length, (i) => kv.set(`v${i}`, values[i]!));
    for (const [i, value] of values.entries()) expect(await kv.get(`v${i}`)).toBe(value);
    expect(await kv.exists('v0')).toBe(true); // the empty string is a value, not absence
  });

  it('non-string and malformed values reject with E_INVALID_VALUE', async (s) => {
    const kv = await s.kv();
    for (const value of [42, null, undefined, { a: 1 }, 'lone \ud800 surrogate']) {
      await expectReject(() => kv.set('k', value as never), 'E_INVALID_VALUE', `set(${String(value)})`);
    }
    expect(await kv.get('k')).toBeNull();
  });

  it('calls made together on one key take effect in the order they were made', async (s) => {
    const kv = await s.kv();
    for (let round = 0; round < 10; round++) {
      const key = `ordered:${round}`;
      // Not awaited one by one: made in one tick, as concurrent code makes them.
      const outcomes = await Promise.all([
        kv.get(key),
        kv.set(key, 'a'),
        kv.exists(key),
        kv.get(key),
        kv.delete(key),
        kv.get(key),
        kv.set(key, 'b'),
        kv.delete(`other:${round}`),
        kv.get(key),
      ]);
      expect(outcomes, `round ${round}`).toEqual([null, undefined, true, 'a', true, null, undefined, false, 'b']);
      expect(await kv.get(key)).toBe('b');
    }
  });

  it('delete returns true only when a live key was removed', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    expect(await kv.delete('a')).toBe(true);
    expect(await kv.delete('a')).toBe(false);
    expect(await kv.get('a')).toBeNull();
    expect(await kv.delete('never-set')).toBe(false);
  });

  it('keys lists live keys in code point order; default pattern is *', async (s) => {
    const kv = await s.kv();
    const keys = ['b', 'a', 'B', 'a.b', 'a_b', 'ab', '_x', 'Z', 'é', '😀', '\uffff', 'a b', '~'];
    await kv.setMany(keys.map((key) => ({ key, value: key })));
    const sorted = [...keys].sort(compareKeys);
    expect(await kv.keys()).toEqual(sorted);
    expect(await kv.keys('*')).toEqual(sorted);
    expect((await kv.entries()).map((entry) => entry.key)).toEqual(sorted);
  });

  it('hostile keys round-trip and match only themselves as escaped globs', async (s) => {
    const kv = await s.kv();
    await parallel(HOSTILE_KEYS.length, (i) => kv.set(HOSTILE_KEYS[i]!, `value ${i}`));
    for (const [i, key] of HOSTILE_KEYS.entries()) {
      expect(await kv.get(key), JSON.stringify(key)).toBe(`value ${i}`);
      expect(await kv.keys(escapeGlob(key)), JSON.stringify(key)).toEqual([key]);
    }
    expect(await kv.keys()).toEqual([...HOSTILE_KEYS].sort(compareKeys));
    expect(await kv.getMany(HOSTILE_KEYS)).toEqual(HOSTILE_KEYS.map((_, i) => `value ${i}`));
    expect(await kv.deleteMany(HOSTILE_KEYS)).toBe(HOSTILE_KEYS.length);
  });

  it('keys of exactly 1024 UTF-8 bytes are accepted', async (s) => {
    const kv = await s.kv();
    const keys = ['k'.repeat(1024), '€'.repeat(341) + 'a', '😀'.repeat(256)];
    for (const key of keys) {
      expect(utf8Bytes(key)).toBe(1024);
      await kv.set(key, 'ok');
      expect(await kv.get(key)).toBe('ok');
    }
  });

  it('invalid keys reject with E_INVALID_KEY in every method', async (s) => {
    const kv = await s.kv();
    for (const [label, key] of INVALID_KEYS) {
      const k = key as string;
      await expectReject(() => kv.get(k), 'E_INVALID_KEY', `get(${label})`);
      await expectReject(() => kv.set(k, 'v'), 'E_INVALID_KEY', `set(${label})`);
      await expectReject(() => kv.delete(k), 'E_INVALID_KEY', `delete(${label})`);
      await expectReject(() => kv.exists(k), 'E_INVALID_KEY', `exists(${label})`);
      await expectReject(() => kv.getEntry(k), 'E_INVALID_KEY', `getEntry(${label})`);
      await expectReject(() => kv.compareAndSet(k, 'v', null), 'E_INVALID_KEY', `compareAndSet(${label})`);
      await expectReject(() => kv.getMany(['ok', k]), 'E_INVALID_KEY', `getMany(${label})`);
      await expectReject(() => kv.deleteMany(['ok', k]), 'E_INVALID_KEY', `deleteMany(${label})`);
      await expectReject(() => kv.setMany([{ key: k, value: 'v' }]), 'E_INVALID_KEY', `setMany(${label})`);
    }
    expect(await kv.keys()).toEqual([]);
  });
});
