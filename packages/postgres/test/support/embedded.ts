import { startEmbeddedPostgres } from '@stowage/test-env';
import pg from 'pg';
import { afterAll } from 'vitest';

/**
 * What a test file on embedded PGlite works with: PGlite in a process of its own (so that its
 * clock is not this process's `Date`), reached through pglite-socket with the real `pg`
 * driver, and one pool of one connection that every store of the file shares (PGlite is one
 * session behind the socket server's multiplexer, which can interleave the extended-protocol
 * messages of concurrent connections). When the file ends, the pool is ended and PGlite stopped.
 */
export async function embeddedTestSetup(applicationName: string, options: { maxConnections?: number } = {}) {
  const embedded = await startEmbeddedPostgres({ separateProcess: true, ...options });
  const pool = new pg.Pool({ connectionString: embedded.url, max: 1, application_name: applicationName });
  afterAll(async () => {
    await pool.end();
    await embedded.stop();
  });
  return { embedded, pool };
}
