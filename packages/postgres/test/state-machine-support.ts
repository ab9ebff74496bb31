import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ConformanceAdapter, ConformanceContext } from '@stowage/core/conformance';
import pg from 'pg';
import { PostgresKeyValueStore, PostgresProcessBackend, quoteIdentifier, type PostgresConnectionOptions } from '../src/index.js';
import { uniqueSuffix } from './support/context.js';

/** One test's tables: the two process tables and a key-value table for the cursors. */
export interface ProcessTables {
  itemsTable: string;
  transitionsTable: string;
  cursorTable: string;
}

export function processTables(suffix = uniqueSuffix()): ProcessTables {
  return { itemsTable: `pitems_${suffix}`, transitionsTable: `ptrans_${suffix}`, cursorTable: `pcursor_${suffix}` };
}

export async function dropProcessTables(admin: pg.Pool, tables: ProcessTables): Promise<void> {
  await admin.query(Object.values(tables).map((table) => `DROP TABLE IF EXISTS ${quoteIdentifier(table)}`).join(';\n'));
}

/**
 * The process conformance adapter: every test gets its own tables; every `process()` call
 * opens a new backend on them, like another process would.
 */
export function postgresProcessAdapter(name: string, connection: () => PostgresConnectionOptions, admin: () => pg.Pool): ConformanceAdapter {
  return {
    name,
    createContext(): ConformanceContext {
      const tables = processTables();
      return {
        process: async () => {
          const backend = new PostgresProcessBackend({ ...connection(), itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable });
          await backend.ready(); // creates the tables and detects LISTEN, so `capabilities` is known
          return backend;
        },
        kv: async () => new PostgresKeyValueStore({ ...connection(), table: tables.cursorTable }),
        cleanup: () => dropProcessTables(admin(), tables),
      };
    },
  };
}

const WORKER_SCRIPT = fileURLToPath(new URL('./state-machine-worker.ts', import.meta.url));

/** Starts `state-machine-worker.ts` as an OS process (stdout piped for the crash test's protocol). */
export function spawnProcessWorker(url: string, tables: ProcessTables, name: string): ChildProcess {
  return spawn(process.execPath, [WORKER_SCRIPT, name], {
    env: { ...process.env, STOWAGE_WORKER_URL: url, STOWAGE_WORKER_TABLES: JSON.stringify(tables) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}
