/**
 * Smoke test of the example: on the environment's MongoDB server when there is one
 * (STOWAGE_MONGO_URL; under CI=true a missing server fails the run), and its behaviour when
 * no server is configured (a clear message; exit 0 on a laptop, exit 1 under CI).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { MongoClient } from 'mongodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMongoServer, type FoundBackend } from '@stowage/test-env';
import { DATABASE } from '../src/connection.ts';
import { SideEffects } from '../src/side-effects.ts';

const run = promisify(execFile);
const mainScript = fileURLToPath(new URL('../src/main.ts', import.meta.url));

function envWithout(...names: string[]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of names) delete env[name];
  return env;
}

describe('without a MongoDB server configured', () => {
  it('says what it needs and exits 0 outside CI', async () => {
    const { stdout } = await run(process.execPath, [mainScript], { env: envWithout('MONGODB_URI', 'STOWAGE_MONGO_URL', 'CI') });
    expect(stdout).toContain('This example needs a MongoDB server, and none is configured.');
    expect(stdout).toContain('Set MONGODB_URI');
  });

  it('fails under CI=true', async () => {
    const env = { ...envWithout('MONGODB_URI', 'STOWAGE_MONGO_URL'), CI: 'true' };
    const failure = await run(process.execPath, [mainScript], { env }).then(
      () => null,
      (error: { code: number; stdout: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stdout).toContain('CI=true: a missing MongoDB server is a failure here, not a skip.');
  });
});

describe('on a MongoDB server', () => {
  let server: FoundBackend | null;

  beforeAll(async () => {
    server = await findMongoServer(); // null outside CI when none is configured
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('resumes after a crash without repeating a step, and lets one of two racers run', async (context) => {
    if (server === null) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    const { stdout } = await run(process.execPath, [mainScript], {
      env: { ...envWithout('STOWAGE_MONGO_URL'), MONGODB_URI: server.url },
    });
    expect(stdout).toMatch(/\[worker 1\] .*crashing on purpose right after fetch-user/);
    expect(stdout).not.toContain('✘');
    expect(stdout).toContain('All 8 checks passed');

    // Read the side-effect counters back: every workflow of this run saw each step once.
    const ids = [...new Set([...stdout.matchAll(/(checkout-[0-9a-f]{8}-(?:crash|race))/g)].map((match) => match[1]!))];
    expect(ids).toHaveLength(2);
    const client = new MongoClient(server.url);
    try {
      const sideEffects = new SideEffects(client.db(DATABASE));
      for (const id of ids) expect(await sideEffects.calls(id)).toEqual({ createOrder: 1, fetchUser: 1 });
    } finally {
      await client.close();
    }
  });
});
