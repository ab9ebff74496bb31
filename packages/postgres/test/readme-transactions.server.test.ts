import { readFileSync } from 'node:fs';
import { findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { PostgresSnapshotStore } from '../src/index.js';
import { uniqueSuffix } from './support/context.js';

/**
 * The README's transaction snippet, run as it is printed: the first code block of the section
 * "Transactions: your writes and stowage's commit together", given the names it uses.
 */
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf("## Transactions: your writes and stowage's commit together"));
const snippet = /```ts\n([\s\S]*?)\n```/.exec(section)?.[1] ?? '';
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<void>;
const runSnippet = new AsyncFunction('pool', 'snapshots', 'amount', 'id', 'workflowId', 'snapshot', 'expectedVersion', snippet);

const server = await findPostgresServer();

describe.skipIf(server === null)('README: a snapshot saved in the caller’s transaction', () => {
  const schema = `readme_${uniqueSuffix()}`;
  const url = server?.url ?? '';
  // The snippet names its table `accounts`: found through the search path, in a schema of the test's own.
  const pool = new pg.Pool({ connectionString: url, options: `-c search_path=${schema}` });
  const snapshots = new PostgresSnapshotStore<{ step: number }>({ pool, schema });
  const balance = async () => (await pool.query<{ balance: number }>('SELECT balance FROM accounts WHERE id = 1')).rows[0]!.balance;

  beforeAll(async () => {
    await pool.query(`CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.accounts (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO ${schema}.accounts VALUES (1, 100)`);
    await snapshots.save('wf-1', { step: 0 });
  });
  afterAll(async () => {
    await snapshots.close();
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
    await server?.stop();
  });

  test('the snippet is there', () => {
    expect(snippet).toContain('withTransaction(client)');
  });

  test('commit: the balance and the snapshot change together', async () => {
    const { version } = (await snapshots.loadVersioned('wf-1'))!;
    await runSnippet(pool, snapshots, 30, 1, 'wf-1', { step: 1 }, version);
    expect(await balance()).toBe(70);
    expect(await snapshots.load('wf-1')).toEqual({ step: 1 });
  });

  test('a stale expectedVersion rolls the business write back with it', async () => {
    const { version } = (await snapshots.loadVersioned('wf-1'))!;
    await snapshots.save('wf-1', { step: 2 }); // someone else saved in between
    await expect(runSnippet(pool, snapshots, 30, 1, 'wf-1', { step: 3 }, version)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
    expect(await balance()).toBe(70);
    expect(await snapshots.load('wf-1')).toEqual({ step: 2 });
    expect(pool.totalCount - pool.idleCount, 'the snippet returns its client').toBe(0);
  });
});
