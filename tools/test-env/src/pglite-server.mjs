// Runs embedded PGlite behind pglite-socket in its own process (see startEmbeddedPostgres's
// `separateProcess`): its clock is then not the test process's `Date`, as with a real server.
// Prints `{"address":"host:port"}` once listening; exits when stdin closes or on SIGTERM.
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { createPGliteSocketServer } from './pglite-batch-queue.mjs';

const maxConnections = Number(process.argv[2] ?? 16);
const db = await PGlite.create();
const server = createPGliteSocketServer(PGLiteSocketServer, db, maxConnections);
await server.start();
process.stdout.write(`${JSON.stringify({ address: server.getServerConn() })}\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await server.stop().catch(() => undefined);
  await db.close().catch(() => undefined);
  process.exit(0);
}
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
process.on('SIGTERM', stop);
