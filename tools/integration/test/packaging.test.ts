/**
 * Packaging proof: the tarballs we would publish work for someone outside this workspace.
 *
 * `pnpm pack` each published package, `npm install` the tarballs (plus the driver and awaitly
 * from the npm registry) into fresh projects under the OS temp dir, then check that
 * - installing @stowage/postgres does not bring mongodb, and @stowage/mongo does not bring pg;
 * - neither brings vitest (the conformance suite's optional peer);
 * - the README quick start runs both as ESM (`import`, .mjs) and as CommonJS (`require`, .cjs)
 *   against a real database, and a StowageError from the adapter is an instance of the
 *   StowageError class its own module system loads from @stowage/core;
 * - both quick starts also run, as ESM and as CommonJS, on Node.js 22.0.0, the oldest Node
 *   `engines` admits (the tests themselves run on the current Node);
 * - an example started on a Node.js that cannot run its .ts files says what it needs;
 * - the compatibility matrix: the quick start also runs (ESM, on this Node and on the oldest)
 *   with the oldest driver each peer range admits, `pg` 8.11.0 and `mongodb` 6.0.0; the cells
 *   above install the newest (`pg@8`, `mongodb@7`), and the packages' own suites run the
 *   workspace's pinned versions. One smoke per cell, not the conformance suite: CI time.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMongoServer, findPostgresServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';
import { OLDEST_NODE, nodeBinary } from './node-binary.ts';

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, '../../..');
const PUBLISHED = ['core', 'postgres', 'mongo'] as const;
type Published = (typeof PUBLISHED)[number];

let workDir: string;
let oldestNode: string;
const tarballs = {} as Record<Published, string>;

/**
 * The environment for npm and node in the temp projects: ours, minus the npm_config_* settings
 * pnpm injects into scripts (they are pnpm's, not the user's npm configuration), keeping the
 * registry. Network failures fail fast instead of retrying for minutes.
 */
function cleanEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^(npm|pnpm)_config_/i.test(name) && name.toLowerCase() !== 'npm_config_registry') continue;
    env[name] = value;
  }
  return {
    ...env,
    npm_config_loglevel: 'error',
    npm_config_update_notifier: 'false',
    npm_config_fetch_retries: '1',
    npm_config_fetch_timeout: '60000',
    ...extra,
  };
}

async function sh(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}) {
  const { stdout, stderr } = await run(command, args, { cwd, env: cleanEnv(env), maxBuffer: 32 * 1024 * 1024 });
  return { stdout, stderr };
}

/** A fresh npm project with the given tarballs and registry packages installed. */
async function installProject(name: string, packages: string[]): Promise<string> {
  const dir = join(workDir, name);
  await mkdir(dir);
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true }, null, 2));
  await sh('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock', ...packages], dir);
  return dir;
}

/** Package names under node_modules (scoped ones as `@scope/name`). */
async function installedPackages(dir: string): Promise<string[]> {
  const root = join(dir, 'node_modules');
  const names: string[] = [];
  for (const entry of await readdir(root)) {
    if (entry.startsWith('.')) continue;
    if (entry.startsWith('@')) names.push(...(await readdir(join(root, entry))).map((child) => `${entry}/${child}`));
    else names.push(entry);
  }
  return names;
}

/** What `npm ls <name> --all` finds anywhere in the tree (an empty list when absent). */
async function npmLs(dir: string, name: string): Promise<string[]> {
  const { stdout } = await sh('npm', ['ls', name, '--all', '--json'], dir).catch((error: { stdout: string }) => error);
  const found: string[] = [];
  const walk = (node: { dependencies?: Record<string, { version?: string; dependencies?: object }> }) => {
    for (const [dep, child] of Object.entries(node.dependencies ?? {})) {
      if (dep === name) found.push(`${dep}@${child.version}`);
      walk(child as typeof node);
    }
  };
  walk(JSON.parse(stdout || '{}'));
  return found;
}

/** Runs a script in the project with `node` (this process's), or the given Node binary; returns its last line's JSON. */
async function runScript(dir: string, file: string, source: string, env: NodeJS.ProcessEnv, node = process.execPath): Promise<unknown> {
  await writeFile(join(dir, file), source);
  const { stdout } = await sh(node, [file], dir, env);
  const lines = stdout.trim().split('\n');
  return JSON.parse(lines.at(-1)!);
}

beforeAll(async () => {
  oldestNode = await nodeBinary(OLDEST_NODE);
  workDir = await mkdtemp(join(tmpdir(), 'stowage-packaging-'));
  const destination = join(workDir, 'tarballs');
  await mkdir(destination);
  for (const name of PUBLISHED) {
    const packageDir = join(repoRoot, 'packages', name);
    if (!existsSync(join(packageDir, 'dist'))) {
      throw new Error(`packages/${name}/dist is missing: build first (pnpm turbo run build --filter=@stowage/integration-tests...)`);
    }
    const before = new Set(await readdir(destination));
    await sh('pnpm', ['pack', '--pack-destination', destination], packageDir);
    const created = (await readdir(destination)).filter((file) => !before.has(file));
    expect(created).toHaveLength(1);
    tarballs[name] = join(destination, created[0]!);
  }
}, 300_000);

afterAll(async () => {
  if (workDir) await rm(workDir, { recursive: true, force: true });
});

describe('packed tarballs', () => {
  it('have no workspace: ranges left and ship only dist, README, LICENSE and package.json', async () => {
    for (const name of PUBLISHED) {
      const { stdout: listing } = await sh('tar', ['-tzf', tarballs[name]], workDir);
      const files = listing.trim().split('\n').sort();
      for (const file of files) expect(file).toMatch(/^package\/(dist\/.+|README\.md|package\.json|LICENSE)$/);
      expect(files).toEqual(expect.arrayContaining(['package/dist/index.js', 'package/dist/index.cjs', 'package/dist/index.d.ts', 'package/dist/index.d.cts']));

      const { stdout: manifest } = await sh('tar', ['-xzOf', tarballs[name], 'package/package.json'], workDir);
      expect(manifest).not.toContain('workspace:');
    }
  });
});

describe('@stowage/postgres installed from its tarball', () => {
  let project: string;
  let database: FoundBackend;

  beforeAll(async () => {
    project = await installProject('quickstart-postgres', [tarballs.core, tarballs.postgres, 'pg@8', 'awaitly@1.35.0']);
    // A real server when one is configured, embedded PGlite (through the real pg driver) otherwise.
    database = (await findPostgresServer()) ?? (await startEmbeddedPostgres());
    console.log(`[packaging] postgres quick start runs on ${database.label}`);
  }, 300_000);

  afterAll(async () => {
    await database?.stop();
  });

  it('does not pull in mongodb or vitest', async () => {
    const installed = await installedPackages(project);
    expect(installed).toEqual(expect.arrayContaining(['@stowage/core', '@stowage/postgres', 'pg', 'awaitly']));
    expect(installed).not.toContain('mongodb');
    expect(installed).not.toContain('vitest');
    expect(await npmLs(project, 'mongodb')).toEqual([]);
  });

  it('runs the quick start as ESM (import)', async () => {
    const result = await runScript(project, 'quickstart.mjs', postgresQuickStart('esm'), { DATABASE_URL: database.url });
    expect(result).toEqual(expectedQuickStart);
  });

  it('runs the quick start as CommonJS (require)', async () => {
    const result = await runScript(project, 'quickstart.cjs', postgresQuickStart('cjs'), { DATABASE_URL: database.url });
    expect(result).toEqual(expectedQuickStart);
  });

  it(`runs the quick start as ESM and as CommonJS on Node.js ${OLDEST_NODE}`, async () => {
    const env = { DATABASE_URL: database.url };
    expect(await runScript(project, 'quickstart.mjs', postgresQuickStart('esm'), env, oldestNode)).toEqual(expectedQuickStart);
    expect(await runScript(project, 'quickstart.cjs', postgresQuickStart('cjs'), env, oldestNode)).toEqual(expectedQuickStart);
  });
});

describe('@stowage/mongo installed from its tarball', () => {
  let project: string;
  let database: FoundBackend | null;

  beforeAll(async () => {
    project = await installProject('quickstart-mongo', [tarballs.core, tarballs.mongo, 'mongodb@7', 'awaitly@1.35.0']);
    database = await findMongoServer(); // null only outside CI; under CI a missing server throws
    console.log(`[packaging] mongo quick start runs on ${database?.label ?? 'nothing: no MongoDB server found'}`);
  }, 300_000);

  afterAll(async () => {
    await database?.stop();
  });

  it('does not pull in pg or vitest', async () => {
    const installed = await installedPackages(project);
    expect(installed).toEqual(expect.arrayContaining(['@stowage/core', '@stowage/mongo', 'mongodb', 'awaitly']));
    expect(installed).not.toContain('pg');
    expect(installed).not.toContain('vitest');
    expect(await npmLs(project, 'pg')).toEqual([]);
  });

  it('loads as ESM and as CommonJS', async () => {
    const check = (kind: 'esm' | 'cjs') => `
      ${kind === 'esm' ? "import * as mongoAdapter from '@stowage/mongo'; import * as core from '@stowage/core';" : "const mongoAdapter = require('@stowage/mongo'); const core = require('@stowage/core');"}
      console.log(JSON.stringify({ mongo: typeof mongoAdapter.mongo, createMongoPersistence: typeof mongoAdapter.createMongoPersistence, StowageError: typeof core.StowageError }));`;
    const expected = { mongo: 'function', createMongoPersistence: 'function', StowageError: 'function' };
    expect(await runScript(project, 'load.mjs', check('esm'), {})).toEqual(expected);
    expect(await runScript(project, 'load.cjs', check('cjs'), {})).toEqual(expected);
  });

  it('runs the quick start as ESM and as CommonJS', async (context) => {
    if (database === null) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL); under CI this fails instead');
    const env = { MONGODB_URI: database.url };
    expect(await runScript(project, 'quickstart.mjs', mongoQuickStart('esm'), env)).toEqual(expectedQuickStart);
    expect(await runScript(project, 'quickstart.cjs', mongoQuickStart('cjs'), env)).toEqual(expectedQuickStart);
  });

  it(`runs the quick start as ESM and as CommonJS on Node.js ${OLDEST_NODE}`, async (context) => {
    if (database === null) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL); under CI this fails instead');
    const env = { MONGODB_URI: database.url };
    expect(await runScript(project, 'quickstart.mjs', mongoQuickStart('esm'), env, oldestNode)).toEqual(expectedQuickStart);
    expect(await runScript(project, 'quickstart.cjs', mongoQuickStart('cjs'), env, oldestNode)).toEqual(expectedQuickStart);
  });
});

describe.each([
  { driver: 'pg@8.11.0', adapter: 'postgres' as const },
  { driver: 'mongodb@6.0.0', adapter: 'mongo' as const },
])('the oldest driver the peer range admits: $driver', ({ driver, adapter }) => {
  let project: string;
  let database: FoundBackend | null;

  beforeAll(async () => {
    project = await installProject(`compat-${driver.replace(/[@.]/g, '-')}`, [tarballs.core, tarballs[adapter], driver, 'awaitly@1.35.0']);
    database = adapter === 'postgres' ? ((await findPostgresServer()) ?? (await startEmbeddedPostgres())) : await findMongoServer();
  }, 300_000);

  afterAll(async () => {
    await database?.stop();
  });

  it(`runs the quick start as ESM, on this Node.js and on ${OLDEST_NODE}`, async (context) => {
    if (database === null) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL); under CI this fails instead');
    const [name, version] = driver.split('@');
    const { stdout } = await sh('npm', ['ls', name!, '--json'], project);
    expect((JSON.parse(stdout) as { dependencies: Record<string, { version: string }> }).dependencies[name!]!.version).toBe(version);
    const [script, env] = adapter === 'postgres' ? [postgresQuickStart('esm'), { DATABASE_URL: database.url }] : [mongoQuickStart('esm'), { MONGODB_URI: database.url }];
    expect(await runScript(project, 'quickstart.mjs', script, env)).toEqual(expectedQuickStart);
    expect(await runScript(project, 'quickstart.mjs', script, env, oldestNode)).toEqual(expectedQuickStart);
  });
});

describe(`an example started on Node.js ${OLDEST_NODE}`, () => {
  it('says it needs Node.js >= 22.18 instead of failing on the .ts extension', async () => {
    const example = join(repoRoot, 'examples', 'cache-aside');
    const failure = await run(oldestNode, ['--import', '../require-node.mjs', 'src/main.ts'], { cwd: example }).then(
      () => null,
      (error: { code: number; stderr: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr).toContain(`needs Node.js >= 22.18; this is Node.js ${OLDEST_NODE}`);
    expect(failure?.stderr).not.toContain('Unknown file extension');
  });
});

/** What every quick start prints on its last line. */
const expectedQuickStart = {
  result: { ok: true, value: { orderId: 'order-for-123', total: 42 } },
  calls: { fetchUser: 1, createOrder: 1 },
  stateAfterCompletion: null,
  errorIsStowageError: true,
  errorCode: 'E_INVALID_KEY',
};

/**
 * The README quick start (durable.run over the store), plus two checks a user never writes:
 * the snapshot is gone after completion (awaitly deletes it), and an invalid id fails with a
 * StowageError of this module system's @stowage/core.
 */
function quickStartBody(openStore: string): string {
  return `
  const calls = { fetchUser: 0, createOrder: 0 };
  const fetchUser = async (id) => { calls.fetchUser++; return ok({ id }); };
  const createOrder = async (user) => { calls.createOrder++; return ok({ orderId: 'order-for-' + user.id, total: 42 }); };
  const main = async () => {
    const store = ${openStore};
    const id = 'checkout-' + process.pid + '-' + Date.now();
    const result = await durable.run(
      { fetchUser, createOrder },
      async ({ step, deps }) => {
        const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
        return step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
      },
      { id, store },
    );
    const stateAfterCompletion = await store.load(id);
    let error;
    try { await store.load(''); } catch (caught) { error = caught; }
    await store.close();
    console.log(JSON.stringify({
      result, calls, stateAfterCompletion,
      errorIsStowageError: error instanceof StowageError, errorCode: error && error.code,
    }));
  };
  main().catch((error) => { console.error(error); process.exit(1); });`;
}

function postgresQuickStart(kind: 'esm' | 'cjs'): string {
  const imports =
    kind === 'esm'
      ? `import { postgres } from '@stowage/postgres';
         import { StowageError } from '@stowage/core';
         import { durable } from 'awaitly/durable';
         import { ok } from 'awaitly';`
      : `const { postgres } = require('@stowage/postgres');
         const { StowageError } = require('@stowage/core');
         const { durable } = require('awaitly/durable');
         const { ok } = require('awaitly');`;
  return imports + quickStartBody('postgres(process.env.DATABASE_URL)');
}

function mongoQuickStart(kind: 'esm' | 'cjs'): string {
  const imports =
    kind === 'esm'
      ? `import { mongo } from '@stowage/mongo';
         import { StowageError } from '@stowage/core';
         import { durable } from 'awaitly/durable';
         import { ok } from 'awaitly';`
      : `const { mongo } = require('@stowage/mongo');
         const { StowageError } = require('@stowage/core');
         const { durable } = require('awaitly/durable');
         const { ok } = require('awaitly');`;
  return imports + quickStartBody(`mongo({ url: process.env.MONGODB_URI, database: 'stowage_packaging_' + process.pid })`);
}
