import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { PostgresProcessBackend, processSchemaSql } from '../src/index.js';

describe('state-machine schema', () => {
  test('the README shows exactly the DDL processSchemaSql() returns', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /<!-- process-schema:start -->\n```sql\n([\s\S]*?)\n```\n<!-- process-schema:end -->/.exec(readme);
    expect(block, 'README.md has a process schema block').not.toBeNull();
    expect(block![1]).toBe(processSchemaSql().trim());
  });

  test('names are quoted and schema-qualified; a backend reports the DDL it runs', async () => {
    const ddl = processSchemaSql({ schema: 'App', itemsTable: 'Items', transitionsTable: 'Log' });
    expect(ddl.startsWith('CREATE SCHEMA IF NOT EXISTS "App";')).toBe(true);
    expect(ddl).toContain('CREATE TABLE IF NOT EXISTS "App"."Items"');
    expect(ddl).toContain('CREATE TABLE IF NOT EXISTS "App"."Log"');
    const backend = new PostgresProcessBackend({ url: 'postgresql://127.0.0.1:1/none', schema: 'App', itemsTable: 'Items', transitionsTable: 'Log' });
    expect(backend.schemaSql()).toBe(ddl);
    await backend.close();
  });

  test('identifiers that are not plain SQL names are rejected', () => {
    for (const itemsTable of ['bad name', 'x"; DROP TABLE y; --', '']) {
      expect(() => processSchemaSql({ itemsTable })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      expect(() => new PostgresProcessBackend({ url: 'postgresql://127.0.0.1:1/none', itemsTable })).toThrow(
        expect.objectContaining({ code: 'E_INVALID_OPTION' }),
      );
    }
  });
});
