import { compileGlob, globMatcher } from '@stowage/core/adapter';
import { afterAll, expect, test } from 'vitest';
import { PostgresKeyValueStore } from '../src/index.js';
import { globMatchParameters, globMatchSql } from '../src/glob.js';
import { encodeText } from '../src/key-encoding.js';
import { serverTestSetup } from './support/server.js';

/**
 * Globs over keys stored with the U+0000/U+0001 escape: exact, and matched in time linear in
 * the key whatever the glob. A slow plan is turned into a failure by a statement_timeout on
 * the connection, so nothing here measures time.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup({ max: 2, statement_timeout: 3000 });

/** Globs of at most 8 KB (1024 UTF-8 bytes of key plus wildcards) meant to be expensive. */
const HOSTILE_GLOBS = [
  '?'.repeat(7272),
  '*?'.repeat(2700),
  `${'*\u0000'.repeat(2000)}*x`,
  `${'*a'.repeat(2700)}b`,
  `${'*\u0001?'.repeat(1300)}`,
];

/** 2,000 keys with escapes, of about 800 to 1,000 UTF-8 bytes. */
function escapedKeys(): string[] {
  return Array.from({ length: 2000 }, (_, i) => `k${i}\u0000${'a\u0001'.repeat(400 + (i % 100))}${i}`);
}

describeServer('globs over escaped keys', () => {
  afterAll(async () => {
    await admin.query('SET statement_timeout = 0');
  });

  test('matching is exact: the SQL agrees with the kit glob matcher on keys with U+0000, U+0001 and their look-alikes', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const keys = ['\u0000', '\u0001', '0', '1', '00', '01', '10', '\u00010', '\u00011', '0\u0001', 'a\u0000b', 'a\u0001b', 'a0b', 'a01b',
      '\u0000\u0000', '\u0001\u0001', '\u0000\u0001', 'x%_\\\u0000', '😀\u0000😀', 'aa\u0001aa'];
    await kv.setMany(keys.map((key) => ({ key, value: 'v' })));
    const globs = ['*', '?', '??', '???', '*0*', '*1*', '0*', '*0', '\u0000*', '*\u0000', '*\u0001*', '?0', '0?', '?\u0000', '\u0001?',
      'a?b', 'a??b', '*\u0000\u0001', '*\u0001\u0001*', 'x\\%\\_\\\\?', '😀?😀', '*a\u0001a*', '*??*', '\u00010', '*1', '1*'];
    for (const glob of globs) {
      const compiled = compileGlob(glob);
      const matches = globMatcher(glob);
      const { rows } = await admin.query(
        `SELECT key FROM ${tables.kv} WHERE ${globMatchSql('key', '$1', '$2')} ORDER BY key`,
        globMatchParameters(compiled),
      );
      const expected = keys.filter(matches).map(encodeText).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      expect(rows.map((row: { key: string }) => row.key), JSON.stringify(glob)).toEqual(expected);
    }
    await kv.close();
  });

  test('2,000 escaped keys against 8 KB hostile globs: each listing finishes within a 3 s statement_timeout, no 2201B', { timeout: 120_000 }, async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    await kv.setMany(escapedKeys().map((key) => ({ key, value: 'v' })));
    for (const glob of HOSTILE_GLOBS) {
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n FROM ${tables.kv} WHERE ${globMatchSql('key', '$1', '$2')}`,
        globMatchParameters(compileGlob(glob)),
      );
      expect(rows[0].n, JSON.stringify(glob.slice(0, 8))).toBe(escapedKeys().filter(globMatcher(glob)).length);
    }
    await kv.close();
  });

  // The listings of the key-value store and the cache match with the same SQL (globMatchSql):
  // the bound holds through the public API.
  test('kv.keys() with 8 KB hostile globs over 2,000 escaped keys, under a 3 s statement_timeout', { timeout: 120_000 }, async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, pool: { statement_timeout: 3000 } });
    const keys = escapedKeys();
    await kv.setMany(keys.map((key) => ({ key, value: 'v' })));
    for (const glob of HOSTILE_GLOBS) expect(await kv.keys(glob)).toEqual(keys.filter(globMatcher(glob)).sort());
    await kv.close();
  });
});
