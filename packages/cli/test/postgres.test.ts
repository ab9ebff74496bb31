import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { connect, createPostgresPersistence } from '@stowage/postgres';
import { findPgBouncer, findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { snapshot, startUi, stowage, unique } from './support.js';

/*
 * `stowage inspect` against every PostgreSQL backend: data written by the real stores (in a
 * schema of its own), then read back through the built CLI.
 */

/** `all`: every case; otherwise the views and pages only (PgBouncer runs the server's SQL, through the pooler). */
const backends: Array<[string, () => Promise<FoundBackend | null>, 'all' | 'views']> = [
  // The PGlite of test/global-setup.ts, stopped there.
  ['PGlite', async () => ({ url: inject('pgliteUrl'), source: 'embedded', label: 'PGlite', stop: async () => {} }), 'all'],
  ['server', findPostgresServer, 'all'],
  ['PgBouncer', findPgBouncer, 'views'],
];

describe.each(backends)('inspect on %s', (_name, find, cases) => {
  let backend: FoundBackend | null;
  const schema = unique('cli');
  let url: string;

  beforeAll(async () => {
    backend = await find();
    if (!backend) return;
    url = backend.url;
    const db = connect({ url, schema });
    const store = db.snapshots({ lock: true });
    const orders = db.snapshots({ prefix: 'orders:', lock: true });
    await store.save('wf-running', snapshot('running', ['fetch'], 'charge'));
    await store.save('wf-done', snapshot('completed', ['fetch', 'charge', 'ship']));
    await store.save('wf-failed', snapshot('failed', ['fetch']));
    for (let i = 0; i < 5; i++) await orders.save(`o-${i}`, snapshot('running', ['reserve']));
    expect(await orders.tryAcquire('o-1', { ttlMs: 600_000 })).not.toBeNull();
    const locks = db.locks();
    await locks.acquire('report:nightly', 600_000, 'worker-a');
    await locks.acquire('report:weekly', 600_000, 'worker-b');
    const breakers = db.circuitBreaker();
    for (let i = 0; i < 3; i++) await breakers.recordFailure('payments-api', 3, { cooldown: 60_000 });
    await breakers.recordSuccess('search-api');
    for (let i = 0; i < 2; i++) await breakers.recordFailure('flaky-api', 2, { cooldown: 1 }); // reads half-open at once
    const idempotency = db.idempotency();
    await idempotency.reserve('charge:order-1', 600_000);
    const done = await idempotency.reserve('charge:order-2', 600_000);
    if (done.status === 'acquired') await idempotency.complete('charge:order-2', done.token, { receipt: 2 }, 3_600_000);
    const processes = db.process();
    await processes.createItem({ process: 'devices', id: 'd-1', state: 'new', data: {} });
    await processes.createItem({ process: 'devices', id: 'd-2', state: 'new', data: {} });
    await processes.createItem({ process: 'devices', id: 'd-3', state: 'active', data: {} });
    const cache = db.cache({ prefix: 'users:' });
    await cache.set('1', { name: 'a' }, 600_000);
    await cache.set('2', { name: 'b' }, 1);
    await db.close();
    // awaitly's key-value layout (seed 002): one JSON value per workflow under `workflow:state:`.
    const persistence = await createPostgresPersistence({ url, schema });
    await persistence.save('kv-a', snapshot('completed', ['one']));
    await persistence.save('kv-b', snapshot('running', ['one', 'two'], 'three'));
    await persistence.close();
  });

  afterAll(async () => {
    if (!backend) return;
    const client = new pg.Client(backend.url);
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
    await backend.stop();
  });

  const run = (...args: string[]) => stowage(['inspect', ...args, '--url', url, '--schema', schema]);

  it('lists workflows with status, last step, steps and the live lease', async () => {
    const { code, stdout } = await run('workflows', '--json');
    expect(code).toBe(0);
    const page = JSON.parse(stdout);
    expect(page.nextCursor).toBeNull();
    const byId = Object.fromEntries(page.items.map((row: { namespace: string; id: string }) => [`${row.namespace}${row.id}`, row]));
    expect(Object.keys(byId).sort()).toEqual(['orders:o-0', 'orders:o-1', 'orders:o-2', 'orders:o-3', 'orders:o-4', 'wf-done', 'wf-failed', 'wf-running']);
    expect(byId['wf-running']).toMatchObject({ status: 'running', lastStep: 'charge', steps: 1, leaseOwner: null });
    expect(byId['wf-done']).toMatchObject({ status: 'completed', lastStep: 'ship', steps: 3 });
    expect(byId['orders:o-1'].leaseOwner).toEqual(expect.any(String));
    expect(byId['orders:o-1'].leaseExpiresInMs).toBeGreaterThan(500_000);
    expect(byId['orders:o-2'].leaseOwner).toBeNull();
  });

  it('lists the workflows of createPostgresPersistence (--kv)', async () => {
    const [all, running] = await Promise.all([run('workflows', '--kv', '--json'), run('workflows', '--kv', '--json', '--status', 'running', '--limit', '1')]);
    expect(JSON.parse(all.stdout).items).toEqual([
      expect.objectContaining({ namespace: 'workflow:state:', id: 'kv-a', status: 'completed', lastStep: 'one', steps: 1 }),
      expect.objectContaining({ namespace: 'workflow:state:', id: 'kv-b', status: 'running', lastStep: 'three', steps: 2 }),
    ]);
    expect(JSON.parse(running.stdout)).toEqual({ items: [expect.objectContaining({ id: 'kv-b' })], nextCursor: null });
  });

  it.runIf(cases === 'all')('filters by status, namespace, id prefix and age', async () => {
    const ids = async (...args: string[]) =>
      JSON.parse((await run('workflows', '--json', ...args)).stdout).items.map((row: { namespace: string; id: string }) => row.namespace + row.id);
    // Each call is a process of its own: run them side by side.
    expect(await Promise.all([ids('--status', 'failed'), ids('--namespace', 'orders:', '--prefix', 'o-3'), ids('--prefix', 'wf-d'), ids('--older-than', '1d')])).toEqual([
      ['wf-failed'],
      ['orders:o-3'],
      ['wf-done'],
      [],
    ]);
  });

  it('pages with a keyset cursor: every workflow once, in key order', async () => {
    const [firstRun, all] = await Promise.all([run('workflows', '--json', '--limit', '3'), run('workflows', '--json', '--limit', '3', '--all')]);
    const first = JSON.parse(firstRun.stdout);
    expect(first.items).toHaveLength(3);
    expect(first.nextCursor).toEqual(expect.any(String));
    const lines = all.stdout.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.map((row) => row.namespace + row.id)).toEqual([
      'wf-done', 'wf-failed', 'wf-running', 'orders:o-0', 'orders:o-1', 'orders:o-2', 'orders:o-3', 'orders:o-4',
    ]);
    const second = JSON.parse((await run('workflows', '--json', '--limit', '3', '--after', first.nextCursor)).stdout);
    expect(second.items.map((row: { id: string }) => row.id)).toEqual(['o-0', 'o-1', 'o-2']);
  });

  it('shows locks held with owner, fence and expiry, breakers, idempotency records, process items per state and caches', async () => {
    const [locksRun, breakersRun, openRun, recordsRun, processesRun, cachesRun] = await Promise.all([
      run('locks', '--json'),
      run('breakers', '--json'),
      run('breakers', '--json', '--status', 'open'),
      run('idempotency', '--json'),
      run('processes', '--json'),
      run('caches', '--json'),
    ]);
    expect(JSON.parse(processesRun.stdout).items).toEqual([
      { process: 'devices', state: 'active', items: 1, leased: 0, oldest: expect.any(String) },
      { process: 'devices', state: 'new', items: 2, leased: 0, oldest: expect.any(String) },
    ]);
    // The entry written with a 1 ms ttl has expired; the sweeper has not removed it (the store closed at once).
    expect(JSON.parse(cachesRun.stdout).items).toEqual([{ prefix: 'users:', entries: 2, expired: 1 }]);
    const locks = JSON.parse(locksRun.stdout).items;
    expect(locks.filter((row: { table: string }) => row.table === 'locks')).toEqual([
      expect.objectContaining({ key: 'report:nightly', owner: 'worker-a', fence: expect.stringMatching(/^\d+$/) }),
      expect.objectContaining({ key: 'report:weekly', owner: 'worker-b' }),
    ]);
    // A workflow lease of a store with a prefix is keyed prefix + U+0000 + id (stored escaped; shown as it is).
    expect(locks.filter((row: { table: string }) => row.table === 'workflowLocks').map((row: { key: string }) => row.key)).toEqual(['orders:\u0000o-1']);
    const breakers = JSON.parse(breakersRun.stdout).items;
    expect(breakers).toEqual([
      expect.objectContaining({ key: 'flaky-api', state: 'half-open', failures: 2 }),
      expect.objectContaining({ key: 'payments-api', state: 'open', failures: 3, lastFailure: expect.any(String), openUntil: expect.any(String) }),
      expect.objectContaining({ key: 'search-api', state: 'closed', failures: 0 }),
    ]);
    const open = JSON.parse(openRun.stdout).items;
    expect(open.map((row: { key: string }) => row.key)).toEqual(['payments-api']);
    const records = JSON.parse(recordsRun.stdout).items;
    expect(records).toEqual([
      expect.objectContaining({ key: 'charge:order-1', status: 'in-flight' }),
      expect.objectContaining({ key: 'charge:order-2', status: 'completed', expiresInMs: expect.any(Number) }),
    ]);
  });

  it.runIf(cases === 'all')('ui: the page shows the workflows and locks (the browser test is ui.test.ts)', async () => {
    const ui = await startUi(['--url', url, '--schema', schema]);
    try {
      const html = await (await fetch(ui.address)).text();
      expect(html).toMatch(/<td><a href="\/workflow\?namespace=&amp;id=wf-failed">wf-failed<\/a><\/td><td class="s-failed">failed<\/td>/);
      expect(html).toMatch(/<td>report:nightly<\/td><td>worker-a<\/td>/);
    } finally {
      ui.stop();
    }
  });

  it.runIf(cases === 'all')('prints a readable table, and one workflow with its steps', async () => {
    const [{ stdout }, one] = await Promise.all([run('locks'), run('workflow', 'wf-done')]);
    const [header, ...rows] = stdout.trim().split('\n');
    expect(header).toMatch(/^KEY\s+OWNER\s+FENCE\s+EXPIRES IN\s+TABLE$/);
    expect(rows.some((row) => /^report:nightly\s+worker-a\s+\d+\s+9m \d+s\s+locks$/.test(row) || /^report:nightly\s+worker-a\s+\d+\s+10m\s+locks$/.test(row))).toBe(true);
    expect(one.stdout).toMatch(/^status: completed\nSTEP\s+OUTCOME\s+RESULT\nfetch\s+ok\s+\{"step":"fetch"\}/);
  });
});
