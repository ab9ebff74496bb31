/**
 * KeyValueStore cases: getMany, setMany (all or nothing) and deleteMany.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import { PAST_SHORT_TTL, SHORT_TTL, expectReject, sleep } from '../../helpers.js';

export const batchCases = defineCases('KeyValueStore', (it) => {
  it('getMany returns values aligned with the keys, null for missing', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    await kv.set('c', '3');
    expect(await kv.getMany(['c', 'missing', 'a', 'a'])).toEqual(['3', null, '1', '1']);
    expect(await kv.getMany([])).toEqual([]);
  });

  it('setMany writes all entries, with per-entry TTL; a repeated key keeps its last value', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'a', value: 'first' },
      { key: 'b', value: 'b', ttl: SHORT_TTL },
      { key: 'a', value: 'last' },
    ]);
    expect(await kv.getMany(['a', 'b'])).toEqual(['last', 'b']);
    await kv.setMany([]);
    await sleep(PAST_SHORT_TTL);
    expect(await kv.getMany(['a', 'b'])).toEqual(['last', null]);
  });

  it('setMany is all or nothing when one entry is invalid', async (s) => {
    const kv = await s.kv();
    await kv.set('existing', 'kept');
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: 'existing', value: 'changed' }, { key: 'x2', value: 42 as never }]),
      'E_INVALID_VALUE',
      'setMany with a non-string value',
    );
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: '', value: 'v' }]),
      'E_INVALID_KEY',
      'setMany with an empty key',
    );
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: 'x3', value: 'v', ttl: -5 }]),
      'E_INVALID_OPTION',
      'setMany with a negative ttl',
    );
    expect(await kv.keys()).toEqual(['existing']);
    expect(await kv.get('existing')).toBe('kept');
  });

  it('deleteMany counts live keys removed, each once', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'a', value: '1' },
      { key: 'b', value: '2' },
      { key: 'c', value: '3' },
      { key: 'short', value: '4', ttl: SHORT_TTL },
    ]);
    await sleep(PAST_SHORT_TTL);
    expect(await kv.deleteMany(['a', 'b', 'missing', 'a', 'short'])).toBe(2);
    expect(await kv.keys()).toEqual(['c']);
    expect(await kv.deleteMany([])).toBe(0);
  });
});
