import type { ConformanceAdapter, ConformanceContext } from '@stowage/core/conformance';
import { PostgresKeyValueStore, quoteIdentifier } from '../../src/index.js';
import { qualified, uniqueSuffix, type AdapterSetup } from './context.js';
import { awaitlyKeyValueDdl } from './legacy.js';

/**
 * A conformance adapter whose every test starts from a table of awaitly-postgres's layout,
 * created with its docs' DDL (empty: the cases list every key); the first store adopts it.
 */
export function adoptedKeyValueAdapter(setup: AdapterSetup): ConformanceAdapter {
  return {
    name: setup.name,
    async createContext(): Promise<ConformanceContext> {
      const table = `awaitly_kv_${uniqueSuffix()}`;
      const qualify = (name: string) => qualified(name, setup.schema);
      const searchPath = setup.schema ? `SET search_path TO ${quoteIdentifier(setup.schema)};` : '';
      await setup.admin().query(`${searchPath} ${awaitlyKeyValueDdl(table)}; SET search_path TO DEFAULT`);
      return {
        kv: async () => new PostgresKeyValueStore({ ...setup.connection(), schema: setup.schema, table }),
        cleanup: async () => {
          await setup.admin().query(`DROP TABLE IF EXISTS ${qualify(table)}; DROP SEQUENCE IF EXISTS ${qualify(`${table}_version_seq`)}`);
        },
      };
    },
  };
}
