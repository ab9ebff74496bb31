import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expectCrashScenarioInvariants, runProcessCrashScenario } from '@stowage/core/conformance';
import pg from 'pg';
import { quoteIdentifier, type PostgresProcessBackend } from '../src/index.js';
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

/** Drops the tables, and the version sequence of the cursor table. */
export async function dropProcessTables(admin: pg.Pool, tables: ProcessTables): Promise<void> {
  const statements = Object.values(tables).map((table) => `DROP TABLE IF EXISTS ${quoteIdentifier(table)}`);
  statements.push(`DROP SEQUENCE IF EXISTS ${quoteIdentifier(`${tables.cursorTable}_version_seq`)}`);
  await admin.query(statements.join(';\n'));
}

const WORKER_SCRIPT = fileURLToPath(new URL('./state-machine-worker.ts', import.meta.url));

/** Starts `state-machine-worker.ts` as an OS process (stdout piped for the crash test's protocol). */
export function spawnProcessWorker(url: string, tables: ProcessTables, name: string): ChildProcess {
  return spawn(process.execPath, [WORKER_SCRIPT, name], {
    env: { ...process.env, STOWAGE_WORKER_URL: url, STOWAGE_WORKER_TABLES: JSON.stringify(tables) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

/**
 * The multi-process crash test on the database at `url`: three worker processes
 * (`state-machine-worker.ts`) work through `items` items on `backend`'s tables while `kills`
 * of them are SIGKILLed mid-item, and core's invariants of that scenario must hold
 * (`expectCrashScenarioInvariants`). `label` names the backend in the log.
 */
export async function expectCrashTestHolds(
  label: string,
  url: string,
  backend: PostgresProcessBackend,
  tables: ProcessTables,
  { items, kills }: { items: number; kills: number },
): Promise<void> {
  const result = await runProcessCrashScenario({
    backend,
    spawnWorker: (name) => spawnProcessWorker(url, tables, name),
    items,
    workers: 3,
    kills,
    log: (message) => console.log(`[crash test, ${label}] ${message}`),
  });
  console.log(`[crash test, ${label}] ${JSON.stringify(result)}`);
  expectCrashScenarioInvariants(result);
}
