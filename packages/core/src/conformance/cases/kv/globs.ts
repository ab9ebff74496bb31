/**
 * KeyValueStore cases: glob patterns (literal metacharacters, escapes, malformed patterns) and the
 * listing calls that take them: scan, scanEntries, recentEntries.
 */
import { expect } from 'vitest';
import { compareKeys } from '../../../keys.js';
import { defineCases } from '../../harness.js';
import { PAST_SHORT_TTL, SHORT_TTL, expectReject, sleep } from '../../helpers.js';

export const globCases = defineCases('KeyValueStore', (it) => {
  it('glob: _ % . and regex metacharacters are literal; * and ? are wildcards; \\ escapes', async (s) => {
    const kv = await s.kv();
    const keys = ['a_c', 'abc', 'a%c', 'a.c', 'aXc', 'a*c', 'a?c', 'a\\c', 'ac', 'abbc', 'a\nc', 'a😀c', 'a+c', 'a(c', 'a[c', 'a^c', 'a$c', 'a|c', 'a{c'];
    await kv.setMany(keys.map((key) => ({ key, value: '1' })));
    expect(await kv.keys('a_c')).toEqual(['a_c']);
    expect(await kv.keys('a%c')).toEqual(['a%c']);
    expect(await kv.keys('a.c')).toEqual(['a.c']);
    expect(await kv.keys('a+c')).toEqual(['a+c']);
    expect(await kv.keys('a(c')).toEqual(['a(c']);
    expect(await kv.keys('a[c')).toEqual(['a[c']);
    expect(await kv.keys('a^c')).toEqual(['a^c']);
    expect(await kv.keys('a$c')).toEqual(['a$c']);
    expect(await kv.keys('a|c')).toEqual(['a|c']);
    expect(await kv.keys('a{c')).toEqual(['a{c']);
    expect(await kv.keys('a\\*c')).toEqual(['a*c']);
    expect(await kv.keys('a\\?c')).toEqual(['a?c']);
    expect(await kv.keys('a\\\\c')).toEqual(['a\\c']);
    const threeChars = keys.filter((key) => Array.from(key).length === 3).sort(compareKeys);
    expect(await kv.keys('a?c')).toEqual(threeChars);
    expect(await kv.keys('a*c')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('a*')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('*c')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('ab*')).toEqual(['abbc', 'abc']);
    expect(await kv.keys('%')).toEqual([]);
    expect(await kv.keys('_')).toEqual([]);
    expect(await kv.keys('.*')).toEqual([]);
    expect(await kv.keys('nothing*')).toEqual([]);
  });

  it('glob: literal text with % and _ does not match other keys (prefix scans escape LIKE)', async (s) => {
    const kv = await s.kv();
    await kv.setMany(['user_1:a', 'userX1:a', 'user%1:b', 'user%%:c', 'users:1'].map((key) => ({ key, value: '1' })));
    expect(await kv.keys('user_1:*')).toEqual(['user_1:a']);
    expect(await kv.keys('user%1:*')).toEqual(['user%1:b']);
    expect(await kv.keys('user%*')).toEqual(['user%%:c', 'user%1:b']);
    expect(await kv.keys('user?1:*')).toEqual(['user%1:b', 'userX1:a', 'user_1:a'].sort(compareKeys));
  });

  it('malformed patterns reject with E_INVALID_KEY', async (s) => {
    const kv = await s.kv();
    await expectReject(() => kv.keys('dangling\\'), 'E_INVALID_KEY', 'keys("dangling\\\\")');
    await expectReject(() => kv.keys(42 as never), 'E_INVALID_KEY', 'keys(42)');
    await expectReject(() => kv.entries('a\ud800'), 'E_INVALID_KEY', 'entries(lone surrogate)');
  });

  it('scan streams the live keys keys() lists, in order, page by page; scanEntries their metadata', async (s) => {
    const kv = await s.kv();
    const keys = Array.from({ length: 25 }, (_, i) => `scan:${String(i).padStart(2, '0')}`);
    await kv.setMany([...keys.map((key) => ({ key, value: 'v' })), { key: 'other', value: 'x' }, { key: 'scan:gone', value: 'x', ttl: SHORT_TTL }]);
    await sleep(PAST_SHORT_TTL);
    const scanned: string[] = [];
    for await (const key of kv.scan('scan:*', { pageSize: 4 })) scanned.push(key);
    expect(scanned).toEqual(keys);
    expect(await kv.keys('scan:*')).toEqual(keys);
    const entries = [];
    for await (const entry of kv.scanEntries('scan:1?', { pageSize: 3 })) entries.push(entry);
    expect(entries.map((entry) => entry.key)).toEqual(keys.slice(10, 20));
    expect(entries[0]).not.toHaveProperty('value');
    const all: string[] = [];
    for await (const key of kv.scan()) all.push(key);
    expect(all).toEqual([...keys, 'other'].sort(compareKeys));
    const first = (iterable: AsyncIterable<unknown>) => iterable[Symbol.asyncIterator]().next();
    await expectReject(() => first(kv.scan('*', { pageSize: 0 })), 'E_INVALID_OPTION', 'pageSize 0');
    await expectReject(() => first(kv.scan('bad\\')), 'E_INVALID_KEY', 'dangling escape');
  });

  it('recentEntries lists the live entries under a prefix newest first, page by page', async (s) => {
    const kv = await s.kv();
    if (!kv.recentEntries) return s.skip('the store has no recentEntries (optional)');
    const ids = ['a', 'b', 'c', 'd', 'e'];
    for (const id of ids) {
      await kv.set(`wf:${id}`, id);
      await sleep(5); // distinct updatedAt on any store clock (milliseconds)
    }
    await kv.set('other:z', 'z');
    await kv.set('wf:gone', 'x', { ttl: SHORT_TTL });
    await sleep(PAST_SHORT_TTL);
    const first = await kv.recentEntries({ prefix: 'wf:', limit: 2 });
    expect(first.map((entry) => entry.key)).toEqual(['wf:e', 'wf:d']);
    const rest = await kv.recentEntries({ prefix: 'wf:', limit: 10, after: first.at(-1)! });
    expect(rest.map((entry) => entry.key)).toEqual(['wf:c', 'wf:b', 'wf:a']);
    expect((await kv.recentEntries({ limit: 1 })).map((entry) => entry.key)).toEqual(['other:z']);
    await expectReject(() => kv.recentEntries!({ prefix: 'wf:', limit: 0 }), 'E_INVALID_OPTION', 'limit 0');
    for (const ms of [-8.64e15, 8.64e15]) {
      const after = { updatedAt: new Date(ms), key: 'wf:a' };
      await expectReject(() => kv.recentEntries!({ prefix: 'wf:', limit: 1, after }), 'E_INVALID_OPTION', `after a time no database stores (${after.updatedAt.toISOString()})`);
    }
  });
});
