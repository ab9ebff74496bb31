import { readFileSync } from 'node:fs';
import { stripTypeScriptTypes } from 'node:module';
import { startJongodb, type FoundBackend } from '@stowage/test-env';
import { MongoClient } from 'mongodb';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { mongo, type MongoSnapshotStore } from '../src/index.js';

/**
 * The README's transaction snippet, run as it is printed (the first code block of the section
 * "Transactions: your writes and stowage's commit together"), on jongodb: a view bound to the
 * caller's session works there (FerretDB 1.x refuses, see transactions.test.ts).
 */
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf("## Transactions: your writes and stowage's commit together"));
// Its imports are the parameters below: the rest, its types stripped, runs as the body of a function.
const snippet = stripTypeScriptTypes((/```ts\n([\s\S]*?)\n```/.exec(section)?.[1] ?? '').replace(/^import .*$/gm, ''));
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<void>;
const runSnippet = new AsyncFunction('MongoClient', 'mongo', 'url', 'amount', 'id', 'workflowId', 'snapshot', 'expectedVersion', snippet);

/** The clients the snippet opens, for the test to close (the snippet leaves its client open). */
const opened: MongoClient[] = [];
class TrackedClient extends MongoClient {
  constructor(...args: ConstructorParameters<typeof MongoClient>) {
    super(...args);
    opened.push(this);
  }
}

describe('README: a snapshot saved in the caller’s session (jongodb)', () => {
  let server: FoundBackend;
  let admin: MongoClient;
  let store: MongoSnapshotStore<{ step: number }>;
  const balance = async () => (await admin.db().collection<{ _id: number; balance: number }>('accounts').findOne({ _id: 1 }))!.balance;
  const run = async (...values: unknown[]) => {
    try {
      await runSnippet(TrackedClient, mongo, server.url, ...values);
    } finally {
      await Promise.all(opened.splice(0).map((client) => client.close()));
    }
  };

  beforeAll(async () => {
    server = await startJongodb();
    admin = await new MongoClient(server.url).connect();
    await admin.db().collection<{ _id: number; balance: number }>('accounts').insertOne({ _id: 1, balance: 100 });
    store = mongo<{ step: number }>({ client: admin });
    await store.save('wf-1', { step: 0 });
  });
  afterAll(async () => {
    await store.close();
    await admin.close();
    await server.stop();
  });

  test('the snippet is there', () => {
    expect(snippet).toContain('withTransaction(session)');
  });

  test('commit: the balance and the snapshot change together', async () => {
    const { version } = (await store.loadVersioned('wf-1'))!;
    await run(30, 1, 'wf-1', { step: 1 }, version);
    expect(await balance()).toBe(70);
    expect(await store.load('wf-1')).toEqual({ step: 1 });
  });

  test('a stale expectedVersion aborts the business write with it', async () => {
    const { version } = (await store.loadVersioned('wf-1'))!;
    await store.save('wf-1', { step: 2 }); // someone else saved in between
    await expect(run(30, 1, 'wf-1', { step: 3 }, version)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
    expect(await balance()).toBe(70);
    expect(await store.load('wf-1')).toEqual({ step: 2 });
  });
});
