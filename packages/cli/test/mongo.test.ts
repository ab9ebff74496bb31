import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MongoClient } from 'mongodb';
import { MongoCacheProvider, createMongoPersistence, MongoCircuitBreakerStore, MongoIdempotencyStore, MongoLockProvider, createMongoProcessBackend, mongo } from '@stowage/mongo';
import { findMongoServer, startJongodb, type FoundBackend } from '@stowage/test-env';
import { snapshot, startUi, stowage, unique } from './support.js';

/*
 * `stowage inspect`, `doctor` and `adopt` on MongoDB-wire servers: jongodb (a replica set) and
 * FerretDB (STOWAGE_MONGO_URL). Data written by the real stores, in a database of its own.
 */

/** FerretDB runs the views only: doctor and adopt read the URL and the same commands on both. */
describe.each([
  ['jongodb', startJongodb, 'all'],
  ['FerretDB', findMongoServer, 'views'],
] as const)('on %s', (_name, start, cases) => {
  let backend: FoundBackend | null;
  let client: MongoClient;
  const database = unique('cli');
  let url: string;

  beforeAll(async () => {
    backend = await start();
    if (!backend) return;
    url = backend.url;
    const on = { url, database };
    const store = mongo({ ...on, lock: true });
    const orders = mongo({ ...on, prefix: 'orders:', lock: true });
    await store.save('wf-running', snapshot('running', ['fetch'], 'charge'));
    await store.save('wf-done', snapshot('completed', ['fetch', 'charge', 'ship']));
    for (let i = 0; i < 4; i++) await orders.save(`o-${i}`, snapshot('failed', ['reserve']));
    expect(await orders.tryAcquire('o-1', { ttlMs: 600_000 })).not.toBeNull();
    const locks = new MongoLockProvider(on);
    await locks.acquire('report:nightly', 600_000, 'worker-a');
    const breakers = new MongoCircuitBreakerStore(on);
    for (let i = 0; i < 2; i++) await breakers.recordFailure('payments-api', 2, { cooldown: 60_000 });
    for (let i = 0; i < 2; i++) await breakers.recordFailure('flaky-api', 2, { cooldown: 1 }); // reads half-open at once
    const idempotency = new MongoIdempotencyStore(on);
    await idempotency.reserve('charge:order-1', 600_000);
    const processes = createMongoProcessBackend(on);
    await processes.createItem({ process: 'devices', id: 'd-1', state: 'new', data: {} });
    await processes.createItem({ process: 'devices', id: 'd-2', state: 'active', data: {} });
    const cache = new MongoCacheProvider({ ...on, prefix: 'users:' });
    await cache.set('1', { name: 'a' }, 600_000);
    const persistence = await createMongoPersistence(on);
    await persistence.save('kv-a', snapshot('running', ['one'], 'two'));
    await Promise.all([store, orders, locks, breakers, idempotency, processes, cache, persistence].map((each) => each.close()));
    client = new MongoClient(url);
    await client.connect();
  });

  afterAll(async () => {
    if (!backend) return;
    // jongodb has no dropDatabase; its process (and data) ends with stop().
    await client.db(database).dropDatabase().catch(() => undefined);
    await client.close();
    await backend.stop();
  });

  const inspect = async (...args: string[]) => {
    const result = await stowage(['inspect', ...args, '--url', url, '--db', database, '--json']);
    expect(result.stderr).toBe('');
    return JSON.parse(result.stdout);
  };

  it('inspect: workflows with status, last step and lease; locks, breakers, idempotency, processes, caches', async () => {
    const [workflows, failed, paged, locks, breakers, records, processes, caches, state] = await Promise.all([
      inspect('workflows'),
      inspect('workflows', '--status', 'failed', '--namespace', 'orders:', '--prefix', 'o-2'),
      stowage(['inspect', 'workflows', '--url', url, '--db', database, '--json', '--all', '--limit', '2']),
      inspect('locks'),
      inspect('breakers'),
      inspect('idempotency'),
      inspect('processes'),
      inspect('caches'),
      inspect('workflows', '--kv'),
    ]);
    expect(state.items).toEqual([expect.objectContaining({ namespace: 'workflow:state:', id: 'kv-a', status: 'running', lastStep: 'two', steps: 1 })]);
    expect(processes.items).toEqual([
      { process: 'devices', state: 'active', items: 1, leased: 0, oldest: expect.any(String) },
      { process: 'devices', state: 'new', items: 1, leased: 0, oldest: expect.any(String) },
    ]);
    expect(caches.items).toEqual([{ prefix: 'users:', entries: 1, expired: 0 }]);
    const byId = Object.fromEntries(workflows.items.map((row: { namespace: string; id: string }) => [row.namespace + row.id, row]));
    expect(Object.keys(byId)).toEqual(['wf-done', 'wf-running', 'orders:o-0', 'orders:o-1', 'orders:o-2', 'orders:o-3']);
    expect(byId['wf-running']).toMatchObject({ status: 'running', lastStep: 'charge', steps: 1, leaseOwner: null });
    expect(byId['orders:o-1']).toMatchObject({ status: 'failed', lastStep: 'reserve', leaseOwner: expect.any(String) });
    expect(byId['orders:o-1'].leaseExpiresInMs).toBeGreaterThan(500_000);
    expect(failed.items.map((row: { id: string }) => row.id)).toEqual(['o-2']);
    const lines = paged.stdout.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.map((row) => row.namespace + row.id)).toEqual(Object.keys(byId));
    expect(locks.items).toEqual([
      expect.objectContaining({ key: 'report:nightly', owner: 'worker-a', fence: expect.stringMatching(/^\d+$/), table: 'locks' }),
      expect.objectContaining({ key: 'orders:\u0000o-1', table: 'workflowLocks' }),
    ]);
    expect(breakers.items).toEqual([
      expect.objectContaining({ key: 'flaky-api', state: 'half-open', failures: 2 }),
      expect.objectContaining({ key: 'payments-api', state: 'open', failures: 2 }),
    ]);
    expect(records.items).toEqual([expect.objectContaining({ key: 'charge:order-1', status: 'in-flight', expiresInMs: expect.any(Number) })]);
  });

  it.runIf(cases === 'all')('ui: the page shows the workflows and locks (the browser test is ui.test.ts)', async () => {
    const ui = await startUi(['--url', url, '--db', database]);
    try {
      const html = await (await fetch(ui.address)).text();
      expect(html).toMatch(/<td><a href="\/workflow\?namespace=orders%3A&amp;id=o-1">o-1<\/a><\/td><td class="s-failed">failed<\/td>/);
      expect(html).toMatch(/<td>report:nightly<\/td><td>worker-a<\/td>/);
    } finally {
      ui.stop();
    }
  });

  it.runIf(cases === 'all')('doctor: readPreference other than primary and w=1 in the URL are errors', async () => {
    const withOptions = (options: string) => `${url}${url.includes('?') ? '&' : '?'}${options}`;
    const [clean, secondary, w1] = await Promise.all([
      stowage(['doctor', url, '--db', database]),
      stowage(['doctor', withOptions('readPreference=secondaryPreferred'), '--db', database]),
      stowage(['doctor', withOptions('w=1'), '--db', database]),
    ]);
    expect(clean.stdout).toMatch(/^ok +connection: MongoDB-wire server/m);
    expect(clean.stdout).not.toMatch(/^ERROR/m);
    expect(clean.code).toBe(0);
    expect(secondary.stdout).toMatch(/^ERROR readPreference: readPreference=secondaryPreferred: /m);
    expect(secondary.code).toBe(1);
    expect(w1.stdout).toMatch(/^ERROR writeConcern: w=1: /m);
    expect(w1.code).toBe(1);
  });

  it.runIf(cases === 'all')("doctor and adopt --dry-run see go-go-scope's documents not adopted yet; adopt --apply adopts them", async () => {
    const locks = client.db(database).collection('go_goscope_locks');
    await locks.insertMany([
      { key: 'app:lock:a', owner: 'w1', expiresAt: new Date(Date.now() + 60_000), createdAt: new Date() },
      { key: 'app:lock:b', owner: 'w2', expiresAt: new Date(Date.now() + 60_000), createdAt: new Date() },
    ]);
    const [doctor, plan] = await Promise.all([stowage(['doctor', url, '--db', database]), stowage(['adopt', url, '--db', database, '--dry-run'])]);
    expect(doctor.stdout).toMatch(/^WARN {2}adoption: go_goscope_locks holds go-go-scope's own documents/m);
    expect(plan.stdout).toContain("go_goscope_locks: go-go-scope's lock collection, about 2 row(s)");
    expect(plan.stdout).not.toContain('workflow_state'); // created by the stores: it has its index
    expect(plan.stdout).toContain('  - convert 2 document(s), 500 at a time');
    expect(plan.code).toBe(0);
    expect(await locks.countDocuments({ key: { $exists: true } })).toBe(2); // --dry-run changed nothing

    const applied = await stowage(['adopt', url, '--db', database, '--apply', '--yes', '--key-prefix', 'app:']);
    expect(applied.stderr).toContain('adopting go_goscope_locks with keyPrefix "app:"');
    expect(applied.code).toBe(0);
    const adopted = await locks.find({}).sort({ _id: 1 }).toArray();
    expect(adopted.map(({ _id, owner, fence }) => ({ _id, owner, fence }))).toEqual([
      { _id: 'app:a', owner: 'w1', fence: 1 },
      { _id: 'app:b', owner: 'w2', fence: 1 },
    ]);
    const after = await stowage(['adopt', url, '--db', database, '--dry-run']);
    expect(after.stdout).toMatch(/^nothing to adopt/);
  });

  it.runIf(cases === 'all')("awaitly-mongo's workflow_state: adopt adds its index, its workflows list as they are", async () => {
    const legacy = client.db(database).collection('legacy_state');
    await legacy.insertOne({ _id: 'workflow:state:old-1' as never, value: JSON.stringify(snapshot('completed', ['a', 'b'])) });
    const on = ['--url', url, '--db', database, '--table', 'kv=legacy_state'];
    const plan = await stowage(['adopt', ...on.slice(1), '--dry-run']);
    expect(plan.stdout).toContain("legacy_state: awaitly-mongo's key-value collection, about 1 row(s)\n  - create the index { updatedAt: -1, _id: 1 }");
    const applied = await stowage(['adopt', ...on.slice(1), '--apply', '--yes']);
    expect(applied.code).toBe(0);
    const [after, workflows] = await Promise.all([stowage(['adopt', ...on.slice(1), '--dry-run']), stowage(['inspect', 'workflows', '--kv', '--json', ...on])]);
    expect(after.stdout).not.toContain('legacy_state');
    expect(JSON.parse(workflows.stdout).items).toEqual([
      expect.objectContaining({ namespace: 'workflow:state:', id: 'old-1', status: 'completed', lastStep: 'b', updatedAt: '1970-01-01T00:00:00.000Z' }),
    ]);
  });
});
