/**
 * Runs embedded PGlite (via @stowage/test-env) in its own process, so the database does not
 * share the bench's event loop: stowage and the raw driver both reach it over a socket with
 * the real `pg` driver, as an application would. Sends `{ url, label }` to the parent and stops
 * when the parent disconnects or sends SIGTERM.
 */
import pg from 'pg';
import { startEmbeddedPostgres } from '@stowage/test-env';

const maxConnections = Number(process.env.BENCH_PGLITE_MAX_CONNECTIONS ?? 64);
const backend = await startEmbeddedPostgres({ maxConnections });
await warmUp(backend.url);
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

/**
 * PGlite is WebAssembly: its parser, planner and executor run slowly until V8 has compiled the
 * hot functions with its optimizing tier. Without this the first operation measured would be
 * measured on a colder server than the rest.
 */
async function warmUp(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query('CREATE TEMP TABLE bench_warmup (key text PRIMARY KEY, value text, expires_at timestamptz)');
  const until = performance.now() + 3_000;
  for (let i = 0; performance.now() < until; i++) {
    const key = `k${i % 100}`;
    await client.query('INSERT INTO bench_warmup VALUES ($1, $2, now()) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value', [key, 'v']);
    await client.query('SELECT value FROM bench_warmup WHERE key = $1 AND (expires_at IS NULL OR expires_at > now())', [key]);
  }
  await client.query('DROP TABLE bench_warmup');
  await client.end();
}
