/**
 * Runs embedded PGlite (via @stowage/test-env) in its own process, so the database does not
 * share the bench's event loop: stowage and the raw driver both reach it over a socket with
 * the real `pg` driver, as an application would. Sends `{ url, label }` to the parent and stops
 * when the parent disconnects or sends SIGTERM.
 */
import { startEmbeddedPostgres } from '@stowage/test-env';

const maxConnections = Number(process.env.BENCH_PGLITE_MAX_CONNECTIONS ?? 64);
const backend = await startEmbeddedPostgres({ maxConnections });
let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await backend.stop().catch(() => undefined);
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('disconnect', () => void stop());
process.send?.({ url: backend.url, label: backend.label });
