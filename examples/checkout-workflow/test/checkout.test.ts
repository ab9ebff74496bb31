/**
 * Smoke test of the demo, with real worker processes and a real database: the embedded
 * PostgreSQL that `pnpm demo` uses by default, and the PostgreSQL server of the environment
 * when there is one (STOWAGE_POSTGRES_URL; under CI=true a missing server fails the run).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { postgres } from '@stowage/postgres';
import { runCheckoutDemo } from '../src/demo.ts';
import { DEMO_SCHEMA, SideEffects } from '../src/side-effects.ts';
import pg from 'pg';

const run = promisify(execFile);
const mainScript = fileURLToPath(new URL('../src/main.ts', import.meta.url));

describe('pnpm demo with no database configured', () => {
  it('runs on embedded PGlite and passes every check', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    const { stdout } = await run(process.execPath, [mainScript], { env });
    expect(stdout).toContain('database: embedded PGlite');
    expect(stdout).toMatch(/\[worker 1\] .*crashing on purpose right after fetch-user/);
    // Whether worker 2 still meets the dead worker's 2 s lease depends on how fast this machine
    // got there (a loaded one may not): what must hold is that it resumes instead of re-running.
    expect(stdout).toMatch(/\[worker 2\] .*step fetch-user: already done in the saved snapshot/);
    expect(stdout).toMatch(/\[worker [AB]\] not running: .*lease held by another process/);
    expect(stdout).not.toContain('✘');
    expect(stdout).toContain('All 8 checks passed');
  });
});

describe('the demo on a PostgreSQL server', () => {
  let server: FoundBackend | null;

  beforeAll(async () => {
    server = await findPostgresServer(); // null outside CI when none is configured
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('resumes after a crash without repeating a step, and lets one of two racers run', async (context) => {
    if (server === null) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    const lines: string[] = [];
    const summary = await runCheckoutDemo({ url: server.url, log: (line) => lines.push(line) });

    expect(summary.checks.filter((check) => !check.ok)).toEqual([]);
    expect(summary.crash.crashedWorkerExitCode).toBe(75);
    expect(summary.crash.snapshotAfterCrash).toEqual({ completedSteps: ['fetch-user'], status: 'running' });
    expect(summary.crash.callsAfterCrash).toEqual({ fetchUser: 1 });
    expect(summary.crash.callsAfterResume).toEqual({ createOrder: 1, fetchUser: 1 });
    expect(summary.crash.resumedOutcome).toEqual({
      type: 'finished',
      outcome: 'completed',
      order: { orderId: `order-${summary.crash.workflowId}`, userId: '123', total: 42 },
    });
    expect(summary.race.outcomes.sort()).toEqual(['completed', 'locked-out']);

    // The same facts, read back independently of the demo's own bookkeeping.
    const sideEffects = new SideEffects(server.url);
    const store = postgres({ url: server.url, schema: DEMO_SCHEMA });
    try {
      // Every table of the demo is in its own schema, none in the server's public schema.
      const pool = new pg.Pool({ connectionString: server.url, max: 1 });
      const { rows } = await pool
        .query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [DEMO_SCHEMA])
        .finally(() => pool.end());
      expect(rows.map((row) => row.table_name)).toEqual(expect.arrayContaining(['awaitly_snapshots', 'awaitly_workflow_locks', 'checkout_side_effects']));
      expect(await sideEffects.calls(summary.crash.workflowId)).toEqual({ createOrder: 1, fetchUser: 1 });
      expect(await sideEffects.calls(summary.race.workflowId)).toEqual({ createOrder: 1, fetchUser: 1 });
      expect(await store.load(summary.crash.workflowId)).toBeNull();
      expect(await store.load(summary.race.workflowId)).toBeNull();
    } finally {
      await store.close();
      await sideEffects.close();
    }
  });
});
