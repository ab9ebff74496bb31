import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { DEFAULT_TABLE_NAMES, PostgresLockingSnapshotStore, TableName, postgres, schemaSql, tableDdl } from '../src/index.js';
import { decodeText, encodeText } from '../src/key-encoding.js';

describe('schemaSql', () => {
  test('the README shows exactly the DDL schemaSql() returns', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /<!-- schema:start -->\n```sql\n([\s\S]*?)\n```\n<!-- schema:end -->/.exec(readme);
    expect(block, 'README.md has a schema block').not.toBeNull();
    expect(block![1]).toBe(schemaSql().trim());
  });

  test('covers every table, quoted and schema-qualified', () => {
    const ddl = schemaSql({ schema: 'App' });
    expect(ddl.startsWith('CREATE SCHEMA IF NOT EXISTS "App";')).toBe(true);
    for (const table of Object.values(DEFAULT_TABLE_NAMES)) expect(ddl).toContain(`CREATE TABLE IF NOT EXISTS "App"."${table}"`);
    expect(schemaSql({ only: ['cache'], tables: { cache: 'c' } })).not.toContain('stowage_locks');
  });

  test('derived names stay within 63 characters and distinct for long table names', () => {
    const a = new TableName(`${'t'.repeat(60)}a`);
    const b = new TableName(`${'t'.repeat(60)}b`);
    const index = (name: TableName) => /CREATE INDEX IF NOT EXISTS "([^"]+)"/.exec(tableDdl('kv', name).join('\n'))![1]!;
    expect(index(a).length).toBeLessThanOrEqual(63);
    expect(index(a)).not.toBe(index(b));
  });
});

describe('stored text (keys and key-value values)', () => {
  test('the escape of U+0000 and U+0001 is reversible and leaves other strings alone', () => {
    for (const key of ['plain', '', '\u0000', '\u0001', '\u00010', '\u0001\u0000', 'a\u0000b\u0001c', '0\u00011']) {
      expect(decodeText(encodeText(key))).toBe(key);
      expect(encodeText(key).includes('\u0000')).toBe(false);
    }
    expect(encodeText('ordinary key ✓')).toBe('ordinary key ✓');
    const stored = ['\u0000', '\u0001', '\u00010', '0'].map(encodeText);
    expect(new Set(stored).size).toBe(4);
  });
});

describe('postgres() lock option', () => {
  test('`lock: true` gives a WorkflowLock with default options; `false` or absent gives none', async () => {
    const url = 'postgresql://postgres@127.0.0.1:1/unused'; // never connected: nothing is called
    const locking = postgres({ url, lock: true });
    const plain = postgres({ url, lock: false });
    expect(locking).toBeInstanceOf(PostgresLockingSnapshotStore);
    expect(plain).not.toBeInstanceOf(PostgresLockingSnapshotStore);
    expect(postgres(url)).not.toBeInstanceOf(PostgresLockingSnapshotStore);
    await Promise.all([locking.close(), plain.close()]);
  });

  test('any other lock value is E_INVALID_OPTION', () => {
    expect(() => postgres({ url: 'postgresql://x', lock: 'yes' as never })).toThrow(
      expect.objectContaining({ code: 'E_INVALID_OPTION' }),
    );
  });
});

describe('identifier options', () => {
  test('schema names PostgreSQL reserves (pg_…) are E_INVALID_OPTION before any SQL runs', () => {
    for (const schema of ['pg_catalog', 'PG_temp', 'pg_toast']) {
      expect(() => schemaSql({ schema }), schema).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      expect(() => new TableName('t', schema), schema).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    expect(new TableName('pg_like_table', 'app').sql).toBe('"app"."pg_like_table"');
  });
});
