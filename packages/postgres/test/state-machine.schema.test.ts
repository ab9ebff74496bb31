import { describe, expect, test } from 'vitest';
import { PostgresProcessBackend, schemaSql, type SchemaSqlOptions } from '../src/index.js';

const processSchemaSql = (options: Omit<SchemaSqlOptions, 'only'> = {}) => schemaSql({ ...options, only: ['processItems', 'processTransitions'] });

/** The process tables are ordinary tables of `schemaSql()` (its README block covers them). */
describe('state-machine schema', () => {
  test('names are quoted and schema-qualified; a backend reports the DDL it runs', async () => {
    const ddl = processSchemaSql({ schema: 'App', tables: { processItems: 'Items', processTransitions: 'Log' } });
    expect(ddl.startsWith('CREATE SCHEMA IF NOT EXISTS "App";')).toBe(true);
    expect(ddl).toContain('CREATE TABLE IF NOT EXISTS "App"."Items"');
    expect(ddl).toContain('CREATE TABLE IF NOT EXISTS "App"."Log"');
    const backend = new PostgresProcessBackend({ url: 'postgresql://127.0.0.1:1/none', schema: 'App', itemsTable: 'Items', transitionsTable: 'Log' });
    expect(backend.schemaSql()).toBe(ddl);
    await backend.close();
  });

  test('identifiers that are not plain SQL names are rejected', () => {
    for (const itemsTable of ['bad name', 'x"; DROP TABLE y; --', '']) {
      expect(() => processSchemaSql({ tables: { processItems: itemsTable } })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      expect(() => new PostgresProcessBackend({ url: 'postgresql://127.0.0.1:1/none', itemsTable })).toThrow(
        expect.objectContaining({ code: 'E_INVALID_OPTION' }),
      );
    }
  });
});
