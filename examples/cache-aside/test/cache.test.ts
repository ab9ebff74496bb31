/**
 * Smoke test of the example on the embedded PostgreSQL it uses by default, and on the
 * environment's PostgreSQL server when there is one (STOWAGE_POSTGRES_URL; under CI=true a
 * missing server fails the run).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { runCacheDemo } from '../src/demo.ts';

const run = promisify(execFile);
const mainScript = fileURLToPath(new URL('../src/main.ts', import.meta.url));

describe('pnpm start with no database configured', () => {
  it('runs on embedded PGlite and passes every check', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    const { stdout } = await run(process.execPath, [mainScript], { env });
    expect(stdout).toContain('database: embedded PGlite');
    expect(stdout).not.toContain('✘');
    expect(stdout).toContain('All 7 checks passed');
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

  it('loads once, expires on TTL, matches globs literally and clears only its prefix', async (context) => {
    if (server === null) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    const summary = await runCacheDemo({ url: server.url, log: () => {} });

    expect(summary.checks.filter((check) => !check.ok)).toEqual([]);
    expect(summary.loaderCalls).toEqual({ USD: 1, GBP: 1 });
    expect(summary.keysAfterFill).toEqual(['EUR:100%_off', 'EUR:GBP', 'EUR:JPY', 'EUR:USD', 'USD:EUR']);
    expect(summary.keysMatchingRates).toEqual(['EUR:GBP', 'EUR:JPY', 'EUR:USD']);
    expect(summary.keysAfterDeleteByPattern).toEqual(['USD:EUR']);
    expect(summary.otherCacheKeysAfterClear).toEqual(['user-1']);
  });
});
