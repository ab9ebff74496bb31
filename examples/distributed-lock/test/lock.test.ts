/**
 * Smoke test of the example, with real worker processes (one frozen with SIGSTOP) on the
 * embedded PostgreSQL it uses by default, and on the environment's PostgreSQL server when
 * there is one (STOWAGE_POSTGRES_URL; under CI=true a missing server fails the run).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { runLockDemo } from '../src/demo.ts';
import { readCounter } from '../src/counter.ts';

const run = promisify(execFile);
const mainScript = fileURLToPath(new URL('../src/main.ts', import.meta.url));

describe('pnpm start with no database configured', () => {
  it('runs on embedded PGlite: the stale write is rejected and the count is exact', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    const { stdout } = await run(process.execPath, [mainScript], { env });
    expect(stdout).toContain('database: embedded PGlite');
    expect(stdout).toMatch(/\[worker 1\] write with fence \d+ REJECTED/);
    expect(stdout).toContain('final count: 20 (expected 20)');
    expect(stdout).not.toContain('✘');
    expect(stdout).toContain('All 3 checks passed');
  });
});

describe('the example on a PostgreSQL server', () => {
  let server: FoundBackend | null;

  beforeAll(async () => {
    server = await findPostgresServer(); // null outside CI when none is configured
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('rejects the frozen holder\'s stale write and ends with an exact count', async (context) => {
    if (server === null) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    const summary = await runLockDemo({ url: server.url, workers: 3, incrementsPerWorker: 4, log: () => {} });

    expect(summary.checks.filter((check) => !check.ok)).toEqual([]);
    expect(summary.finalValue).toBe(12);
    expect(summary.frozen.fenceWrittenMeanwhile).toBeGreaterThan(summary.frozen.fence);
    expect(summary.workers.map((worker) => worker.written)).toEqual([4, 4, 4]);
    expect(summary.workers[0]!.rejected).toBeGreaterThanOrEqual(1);

    const pool = new pg.Pool({ connectionString: server.url, max: 1 });
    try {
      expect((await readCounter(pool, summary.counterId)).value).toBe(12);
    } finally {
      await pool.end();
    }
  });
});
