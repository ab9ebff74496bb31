import { expect } from 'vitest';
import type { ResumeStateEntry } from '../../contracts/snapshots.js';
import type { JsonObject } from '../../json.js';
import { defineCases } from '../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  JSON_VALUES,
  NON_JSON_VALUES,
  PAST_SHORT_TTL,
  SHORT_TTL,
  expectReject,
  parallel,
  sleep,
  withClientSkew,
} from '../helpers.js';

/** A snapshot in awaitly's shape. */
function workflowSnapshot(status: 'running' | 'completed' = 'running', extra: JsonObject = {}): JsonObject {
  return {
    formatVersion: 1,
    workflowName: 'checkout',
    steps: { 'fetch-user': { ok: true, value: { id: '123', name: 'Ada' } } },
    execution: { status, lastUpdated: '2024-01-15T10:30:00.000Z', currentStepId: 'fetch-user' },
    metadata: { workflowId: 'wf-1', input: { cart: [1, 2, 3] } },
    ...extra,
  };
}

/** Saves in order with a pause, so that each save gets a later `updatedAt` on any store clock. */
async function saveInOrder(store: { save(id: string, snapshot: JsonObject): Promise<void> }, ids: string[]) {
  for (const id of ids) {
    await store.save(id, workflowSnapshot('running', { id }));
    await sleep(15);
  }
}

export const snapshotCases = defineCases('SnapshotStore', (it) => {
  it('save then load round-trips an awaitly snapshot; load of a missing id is null', async (s) => {
    const store = await s.snapshots();
    const snapshot = workflowSnapshot();
    await store.save('wf-1', snapshot);
    expect(await store.load('wf-1')).toStrictEqual(snapshot);
    expect(await store.load('missing')).toBeNull();
    expect(await store.loadVersioned('missing')).toBeNull();
  });

  it('save replaces; delete removes; delete of a missing id is fine', async (s) => {
    const store = await s.snapshots();
    await store.save('wf', workflowSnapshot('running'));
    await store.save('wf', workflowSnapshot('completed'));
    expect(((await store.load('wf')) as { execution: { status: string } }).execution.status).toBe('completed');
    await store.delete('wf');
    expect(await store.load('wf')).toBeNull();
    await store.delete('wf');
    await store.delete('never-saved');
  });

  it('any JSON value inside a snapshot round-trips; -0 reads back as 0', async (s) => {
    const store = await s.snapshots();
    const snapshot = Object.fromEntries(JSON_VALUES.map(([label, value]) => [label, value])) as JsonObject;
    await store.save('json', snapshot);
    expect(await store.load('json')).toStrictEqual(snapshot);
    await store.save('negative-zero', { value: -0, list: [-0] });
    const loaded = (await store.load('negative-zero')) as { value: number; list: number[] };
    expect(Object.is(loaded.value, 0) && Object.is(loaded.list[0], 0)).toBe(true);
  });

  it('an awaitly ResumeState (a Map of step results) saves, loads back as a ResumeState, and loadResumeState returns it', async (s) => {
    const store = await s.snapshots();
    const failure = new TypeError('card declined', { cause: new Error('gateway said no') });
    const state = {
      steps: new Map<string, ResumeStateEntry>([
        ['fetch-user', { result: { ok: true, value: { id: '123', name: 'Ada' } } }],
        ['charge', { result: { ok: false, error: 'PAYMENT_FAILED', cause: failure }, meta: { origin: 'throw', thrown: failure } }],
      ]),
    };
    await store.save('checkout-123', state as never);
    const loaded = (await store.load('checkout-123')) as unknown as { steps: Map<string, ResumeStateEntry> };
    expect(loaded.steps).toBeInstanceOf(Map);
    expect([...loaded.steps.keys()]).toEqual(['fetch-user', 'charge']);
    expect(loaded.steps.get('fetch-user')).toEqual({ result: { ok: true, value: { id: '123', name: 'Ada' } } });
    const charge = loaded.steps.get('charge')!;
    expect(charge.result).toMatchObject({ ok: false, error: 'PAYMENT_FAILED' });
    const thrown = (charge.meta as { origin: string; thrown: Error }).thrown;
    expect(charge.meta).toMatchObject({ origin: 'throw' });
    expect(thrown).toBeInstanceOf(Error);
    expect([thrown.name, thrown.message, (thrown.cause as Error).message]).toEqual(['TypeError', 'card declined', 'gateway said no']);
    expect((await store.loadResumeState('checkout-123'))?.steps.size).toBe(2);
    await store.save('plain', { n: 1 });
    expect(await store.loadResumeState('plain')).toBeUndefined();
    expect(await store.loadResumeState('missing')).toBeUndefined();
  });

  it("a ResumeState with the step results everyday code returns (void, an undefined member, a Date, NaN) is saved as awaitly's JSON form keeps them", async (s) => {
    const store = await s.snapshots();
    const at = new Date('2024-01-15T10:30:00.123Z');
    const state = {
      steps: new Map<string, ResumeStateEntry>([
        ['void', { result: { ok: true, value: undefined } }],
        ['optional', { result: { ok: true, value: { receipt: 'r-1', coupon: undefined } } }],
        ['date', { result: { ok: true, value: at } }],
        ['nan', { result: { ok: true, value: Number.NaN } }],
      ]),
    };
    await store.save('everyday', state as never);
    const loaded = (await store.loadResumeState('everyday'))!;
    expect([...loaded.steps.keys()]).toEqual(['void', 'optional', 'date', 'nan']);
    expect(loaded.steps.get('void')!.result).toStrictEqual({ ok: true, value: undefined });
    expect(loaded.steps.get('optional')!.result).toStrictEqual({ ok: true, value: { receipt: 'r-1' } });
    expect(loaded.steps.get('date')!.result).toStrictEqual({ ok: true, value: at.toISOString() });
    expect(loaded.steps.get('nan')!.result).toStrictEqual({ ok: true, value: null });
  });

  it('loaded snapshots are copies: mutating them or the saved object changes nothing stored', async (s) => {
    const store = await s.snapshots();
    const snapshot = workflowSnapshot();
    await store.save('wf', snapshot);
    (snapshot.metadata as JsonObject).workflowId = 'mutated after save';
    const loaded = (await store.load('wf')) as JsonObject;
    (loaded.steps as JsonObject).injected = { ok: true, value: 1 };
    expect(await store.load('wf')).toStrictEqual(workflowSnapshot());
  });

  it('a snapshot that is not an object rejects with E_INVALID_VALUE and stores nothing', async (s) => {
    const store = await s.snapshots();
    for (const value of [null, 'text', 42, [1, 2], undefined]) {
      await expectReject(() => store.save('bad', value as never), 'E_INVALID_VALUE', `save(${JSON.stringify(value)})`);
    }
    expect(await store.load('bad')).toBeNull();
  });

  it('what JSON cannot hold inside a snapshot is saved as JSON.stringify writes it (awaitly swallows a refused save): BigInt as its digits, a cycle as "[Circular]"', async (s) => {
    const store = await s.snapshots();
    for (const [label, value] of NON_JSON_VALUES) {
      const snapshot = { formatVersion: 1, steps: { step: { ok: true, value } }, field: value, list: [value] };
      await store.save('lenient', snapshot as never);
      const expected: unknown =
        label === 'BigInt'
          ? { formatVersion: 1, steps: { step: { ok: true, value: '10' } }, field: '10', list: ['10'] }
          : label === 'cycle'
            ? { formatVersion: 1, steps: { step: { ok: true, value: { self: '[Circular]' } } }, field: { self: '[Circular]' }, list: [{ self: '[Circular]' }] }
            : JSON.parse(JSON.stringify(snapshot));
      expect(await store.load('lenient'), label).toStrictEqual(expected);
    }
    // A workflow awaitly resumed saves its merged snapshot with `warnings: undefined`.
    await store.save('merged', { ...workflowSnapshot(), warnings: undefined } as never);
    expect(await store.load('merged')).toStrictEqual(workflowSnapshot());
  });

  it('hostile ids round-trip; invalid ids reject with E_INVALID_KEY', async (s) => {
    const store = await s.snapshots();
    await parallel(HOSTILE_KEYS.length, (i) => store.save(HOSTILE_KEYS[i]!, { i }));
    for (const [i, id] of HOSTILE_KEYS.entries()) expect(await store.load(id), JSON.stringify(id)).toStrictEqual({ i });
    expect((await store.list({ limit: 1000 })).map((item) => item.id).sort()).toEqual([...HOSTILE_KEYS].sort());
    // Ids longer than 1024 bytes are stored in a fitted form, not refused (see the next case).
    for (const [label, id] of INVALID_KEYS.filter(([label]) => !label.startsWith('1025 bytes'))) {
      await expectReject(() => store.save(id as string, {}), 'E_INVALID_KEY', `save(${label})`);
      await expectReject(() => store.load(id as string), 'E_INVALID_KEY', `load(${label})`);
      await expectReject(() => store.delete(id as string), 'E_INVALID_KEY', `delete(${label})`);
    }
  });

  it('ids longer than 1024 bytes (awaitly idem:<key> records, URLs) are saved, loaded and deleted, each distinct', async (s) => {
    // awaitly's own adapters take any id and durable.run swallows a failed save: a refusal
    // would silently turn durability (or awaitly's idempotency) off.
    const store = await s.snapshots();
    const start = `idem:https://shop.example/checkout?cart=${'x'.repeat(1_000)}`;
    const ids = [`${start}&a`, `${start}&b`, '€'.repeat(341) + 'ab'];
    for (const [i, id] of ids.entries()) await store.save(id, { i });
    for (const [i, id] of ids.entries()) expect(await store.load(id), `id ${i}`).toStrictEqual({ i });
    const listed = (await store.list({ limit: 1000 })).map((item) => item.id);
    expect(listed).toHaveLength(3);
    for (const id of listed) expect(new TextEncoder().encode(id).length).toBeLessThanOrEqual(1024);
    await store.delete(ids[0]!);
    expect(await store.load(ids[0]!)).toBeNull();
    expect(await store.load(ids[1]!)).toStrictEqual({ i: 1 });
  });

  it('list is newest first with ISO updatedAt, honours limit and the default of 100', async (s) => {
    const store = await s.snapshots();
    await saveInOrder(store, ['first', 'second', 'third']);
    const items = await store.list();
    expect(items.map((item) => item.id)).toEqual(['third', 'second', 'first']);
    for (const item of items) {
      expect(Object.keys(item).sort()).toEqual(['id', 'updatedAt']);
      expect(new Date(item.updatedAt).toISOString()).toBe(item.updatedAt);
    }
    expect((await store.list({ limit: 2 })).map((item) => item.id)).toEqual(['third', 'second']);
    await store.save('first', workflowSnapshot('completed'));
    expect((await store.list({ limit: 1 }))[0]!.id).toBe('first');
    await parallel(110, (i) => store.save(`bulk-${i}`, { i }));
    expect(await store.list()).toHaveLength(100);
    expect(await store.list({ limit: 1000 })).toHaveLength(113);
  });

  it('list prefix is literal text: % _ . * are not wildcards', async (s) => {
    const store = await s.snapshots();
    const ids = ['orders:1', 'orders:2', 'ordersX1', 'order_1', 'orderX1', 'ord%1', 'ordXX1', 'a.b', 'aXb', 'star*1', 'starX1'];
    await parallel(ids.length, (i) => store.save(ids[i]!, { i }));
    const listed = async (prefix: string) => (await store.list({ prefix })).map((item) => item.id).sort();
    expect(await listed('orders:')).toEqual(['orders:1', 'orders:2']);
    expect(await listed('order_')).toEqual(['order_1']);
    expect(await listed('ord%')).toEqual(['ord%1']);
    expect(await listed('a.')).toEqual(['a.b']);
    expect(await listed('star*')).toEqual(['star*1']);
    expect(await listed('nothing')).toEqual([]);
    expect(await listed('')).toEqual([...ids].sort());
  });

  it('listPage walks every snapshot once, newest first, across pages', async (s) => {
    const store = await s.snapshots();
    const ids = ['p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7'];
    await saveInOrder(store, ids);
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await store.listPage({ limit: 3, cursor });
      seen.push(...page.items.map((item) => item.id));
      cursor = page.nextCursor ?? undefined;
      pages++;
    } while (cursor !== undefined && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());
    const last = await store.listPage({ limit: 7 });
    expect(last.nextCursor).toBeNull();
  });

  it('scan streams every snapshot newest first, page by page, like listPage', async (s) => {
    const store = await s.snapshots();
    const ids = ['a1', 'a2', 'a3', 'a4', 'a5', 'b1'];
    await saveInOrder(store, ids);
    const scanned: string[] = [];
    for await (const item of store.scan({ prefix: 'a', pageSize: 2 })) scanned.push(item.id);
    expect(scanned).toEqual(['a5', 'a4', 'a3', 'a2', 'a1']);
    const all: string[] = [];
    for await (const item of store.scan()) all.push(item.id);
    expect(all).toEqual((await store.list({ limit: 100 })).map((item) => item.id));
  });

  it('invalid list options reject with E_INVALID_OPTION', async (s) => {
    const store = await s.snapshots();
    for (const limit of [0, -1, 1.5, 10_001, Number.NaN]) {
      await expectReject(() => store.list({ limit }), 'E_INVALID_OPTION', `limit ${limit}`);
    }
    await expectReject(() => store.listPage({ cursor: 'not a cursor' }), 'E_INVALID_OPTION', 'bad cursor');
    // Forged cursors whose time is a valid JavaScript date that no database stores (year −5000, 275,760).
    for (const ms of [-8.64e15, -219_842_323_200_000, 8.64e15]) {
      const forged = Buffer.from(JSON.stringify([ms, 'a'])).toString('base64url');
      await expectReject(() => store.listPage({ cursor: forged }), 'E_INVALID_OPTION', `cursor at ${new Date(ms).toISOString()}`);
    }
    await expectReject(() => store.list({ prefix: 42 as never }), 'E_INVALID_OPTION', 'numeric prefix');
  });

  it('versions: loadVersioned gives a version that grows with every save and is never reused, also after delete', async (s) => {
    const store = await s.snapshots();
    await store.save('wf', { n: 1 });
    const first = await store.loadVersioned('wf');
    expect(first).toMatchObject({ snapshot: { n: 1 } });
    expect(Number.isSafeInteger(first!.version) && first!.version > 0).toBe(true);
    expect(new Date(first!.updatedAt).toISOString()).toBe(first!.updatedAt);
    await store.save('wf', { n: 2 });
    const second = await store.loadVersioned('wf');
    expect(second).toMatchObject({ snapshot: { n: 2 } });
    expect(second!.version).toBeGreaterThan(first!.version);
    await store.delete('wf');
    await store.save('wf', { n: 3 });
    expect((await store.loadVersioned('wf'))!.version).toBeGreaterThan(second!.version);
  });

  it('expectedVersion: null creates only when absent, a version saves only when current', async (s) => {
    const store = await s.snapshots();
    await store.save('wf', { n: 1 }, { expectedVersion: null });
    await expectReject(() => store.save('wf', { n: 'again' }, { expectedVersion: null }), 'E_VERSION_CONFLICT', 'create twice');
    const v1 = (await store.loadVersioned('wf'))!.version;
    await store.save('wf', { n: 2 }, { expectedVersion: v1 });
    await expectReject(() => store.save('wf', { n: 'stale' }, { expectedVersion: v1 }), 'E_VERSION_CONFLICT', 'stale');
    await expectReject(() => store.save('other', { n: 1 }, { expectedVersion: v1 }), 'E_VERSION_CONFLICT', 'absent');
    expect(await store.loadVersioned('wf')).toMatchObject({ snapshot: { n: 2 } });
    expect(await store.load('other')).toBeNull();
    await expectReject(() => store.save('wf', { n: 3 }, { expectedVersion: 0 }), 'E_INVALID_OPTION', 'version 0');
  });

  it('expectedVersion: of concurrent saves at one version exactly one wins', { needs: ['atomicUpdates'] }, async (s) => {
    const stores = await s.many(4, (session) => session.snapshots());
    await stores[0]!.save('wf', { n: 0 });
    const start = (await stores[0]!.loadVersioned('wf'))!.version;
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => stores[i % 4]!.save('wf', { writer: i }, { expectedVersion: start })),
    );
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    expect((await stores[1]!.loadVersioned('wf'))!.version).toBeGreaterThan(start);
  });

  it('expectedVersion holds only against the snapshot it read: a version from before a delete never matches again', async (s) => {
    const store = await s.snapshots();
    await store.save('wf', { n: 'first' });
    const before = (await store.loadVersioned('wf'))!.version;
    await store.delete('wf');
    await store.save('wf', { n: 'acknowledged' });
    await store.save('wf', { n: 'acknowledged again' });
    await expectReject(() => store.save('wf', { n: 'stale' }, { expectedVersion: before }), 'E_VERSION_CONFLICT', 'version from before delete');
    expect(await store.load('wf')).toEqual({ n: 'acknowledged again' });
  });

  it('a prefix is a namespace: a store never loads, lists, deletes or overwrites another prefix\'s snapshots', async (s) => {
    const tenant1 = await s.snapshots({ lock: false, prefix: 't1' });
    const tenant11 = await s.snapshots({ lock: false, prefix: 't11' });
    await tenant11.save(':invoice', { owner: 't11' });
    expect(await tenant1.load('1:invoice')).toBeNull();
    expect((await tenant1.list()).map((item) => item.id)).toEqual([]);
    await tenant1.save('1:invoice', { owner: 't1' });
    await tenant1.delete('1:other');
    expect(await tenant11.load(':invoice')).toEqual({ owner: 't11' });
    expect(await tenant1.load('1:invoice')).toEqual({ owner: 't1' });
    expect((await tenant11.list()).map((item) => item.id)).toEqual([':invoice']);
    const unprefixed = await s.snapshots({ lock: false });
    expect((await unprefixed.list()).map((item) => item.id)).toEqual([]);
    for (const prefix of ['\ud800', 'a\u0000b']) {
      await expectReject(() => s.snapshots({ lock: false, prefix }), 'E_INVALID_OPTION', `prefix ${JSON.stringify(prefix)}`);
    }
  });

  it('WorkflowLock: one owner at a time; renew and release need the owner token', async (s) => {
    const [a, b] = await s.many(2, (session) => session.snapshots({ lock: true }));
    expect(typeof a!.tryAcquire).toBe('function');
    const lease = await a!.tryAcquire!('wf', { ttlMs: 10_000 });
    expect(lease?.ownerToken).toEqual(expect.any(String));
    expect(await b!.tryAcquire!('wf', { ttlMs: 10_000 })).toBeNull();
    expect(await b!.renew!('wf', 'not-the-owner', { ttlMs: 10_000 })).toBe(false);
    await b!.release!('wf', 'not-the-owner');
    expect(await b!.tryAcquire!('wf')).toBeNull();
    expect(await a!.renew!('wf', lease!.ownerToken, { ttlMs: 10_000 })).toBe(true);
    await a!.release!('wf', lease!.ownerToken);
    const next = await b!.tryAcquire!('wf', { ttlMs: 10_000 });
    expect(next?.ownerToken).toEqual(expect.any(String));
    expect(next!.ownerToken).not.toBe(lease!.ownerToken);
    expect(await a!.renew!('wf', lease!.ownerToken)).toBe(false);
    expect(await a!.tryAcquire!('other-workflow')).not.toBeNull();
  });

  it('WorkflowLock: an expired lease can be taken; the old owner cannot renew it', async (s) => {
    const [a, b] = await s.many(2, (session) => session.snapshots({ lock: true }));
    const lease = await a!.tryAcquire!('wf', { ttlMs: SHORT_TTL });
    expect(lease).not.toBeNull();
    await sleep(PAST_SHORT_TTL);
    const taken = await b!.tryAcquire!('wf', { ttlMs: 10_000 });
    expect(taken).not.toBeNull();
    expect(await a!.renew!('wf', lease!.ownerToken, { ttlMs: 10_000 })).toBe(false);
    await a!.release!('wf', lease!.ownerToken);
    expect(await a!.tryAcquire!('wf')).toBeNull();
  });

  it('WorkflowLock: of 20 concurrent tryAcquire calls exactly one wins', async (s) => {
    const stores = await s.many(4, (session) => session.snapshots({ lock: true }));
    const results = await parallel(20, (i) => stores[i % 4]!.tryAcquire!('wf', { ttlMs: 10_000 }));
    expect(results.filter((result) => result !== null)).toHaveLength(1);
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const stores = await s.many(5, (session) => session.snapshots({ lock: true }));
    await parallel(5, (i) => stores[i]!.save(`wf-${i}`, { i }));
    expect((await stores[0]!.list()).map((item) => item.id).sort()).toEqual(['wf-0', 'wf-1', 'wf-2', 'wf-3', 'wf-4']);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const store = await s.snapshots({ lock: true });
    await store.save('wf', { n: 1 });
    await Promise.all([store.close(), store.close()]);
    await store.close();
    const calls: [string, () => unknown][] = [
      ['save', () => store.save('wf', { n: 2 })],
      ['load', () => store.load('wf')],
      ['loadVersioned', () => store.loadVersioned('wf')],
      ['delete', () => store.delete('wf')],
      ['list', () => store.list()],
      ['listPage', () => store.listPage()],
      ['tryAcquire', () => store.tryAcquire!('wf')],
      ['renew', () => store.renew!('wf', 'token')],
      ['release', () => store.release!('wf', 'token')],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
    expect(await (await s.snapshots()).load('wf')).toStrictEqual({ n: 1 });
  });

  it('skewed client clock: list order and lease expiry follow the store clock', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const [store, other] = await s.many(2, (session) => session.snapshots({ lock: true }));
    await withClientSkew(async (skew) => {
      skew.set(CLIENT_SKEWS[0]);
      await store!.save('saved-first', { n: 1 });
      await sleep(20);
      skew.set(CLIENT_SKEWS[1]);
      await store!.save('saved-second', { n: 2 });
      expect((await store!.list()).map((item) => item.id)).toEqual(['saved-second', 'saved-first']);

      for (const offset of CLIENT_SKEWS) {
        skew.set(offset);
        const held = await store!.tryAcquire!(`held:${offset}`, { ttlMs: 30_000 });
        const short = await store!.tryAcquire!(`short:${offset}`, { ttlMs: SHORT_TTL });
        expect(held && short).toBeTruthy();
        skew.set(-offset);
        expect(await other!.tryAcquire!(`held:${offset}`), `30 s lease taken at ${offset} ms skew`).toBeNull();
        expect(await store!.renew!(`held:${offset}`, held!.ownerToken, { ttlMs: 30_000 })).toBe(true);
      }
      await sleep(PAST_SHORT_TTL);
      for (const offset of CLIENT_SKEWS) {
        skew.set(offset);
        expect(await other!.tryAcquire!(`short:${-offset}`), `expired lease taken at ${-offset} ms skew`).not.toBeNull();
      }
    });
  });
});
