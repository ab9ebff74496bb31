import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { uniqueName, type MongoTestServer } from './mongo-adapter.js';

/** One test's collections: the process versions and a key-value collection for the cursors. */
export interface ProcessCollections {
  process: string;
  cursors: string;
}

export function processCollections(): ProcessCollections {
  const stem = uniqueName('p');
  return { process: `${stem}_process`, cursors: `${stem}_cursors` };
}

export async function dropProcessCollections(server: MongoTestServer, collections: ProcessCollections): Promise<void> {
  const db = server.admin.db(server.database);
  const names = [...Object.values(collections), `${collections.process}_claims`];
  await Promise.all(names.map((name) => db.dropCollection(name).catch(() => false)));
}

const WORKER_SCRIPT = fileURLToPath(new URL('./state-machine-worker.ts', import.meta.url));

/** Starts `state-machine-worker.ts` as an OS process (stdout piped for the crash test's protocol). */
export function spawnProcessWorker(server: MongoTestServer, collections: ProcessCollections, name: string): ChildProcess {
  return spawn(process.execPath, [WORKER_SCRIPT, name], {
    env: {
      ...process.env,
      STOWAGE_WORKER_URL: server.url,
      STOWAGE_WORKER_DATABASE: server.database,
      STOWAGE_WORKER_COLLECTIONS: JSON.stringify(collections),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}
