import { expect } from 'vitest';
import type { JsonObject } from '../../json.js';
import { defineCases } from '../harness.js';
import { CLIENT_SKEWS, INVALID_KEYS, expectReject, parallel, sleep, withClientSkew } from '../helpers.js';
import { P, PROCESS_CASE_TIMEOUT, itemIds, waitUntil } from '../process-helpers.js';

/*
 * ProcessBackend cases: items, claims and compare-and-set transitions, leases on the
 * database clock, and ordered, resumable feeds. Each `s.process()` is a new backend on the
 * same namespace, like another OS process on the same database.
 */

/** A lease the cases wait out. */
const SHORT_LEASE = 400;
const PAST_SHORT_LEASE = SHORT_LEASE + 350;
/** A lease that outlives any case. */
const LONG_LEASE = 60_000;

export const processBackendCases = defineCases('ProcessBackend', { timeout: PROCESS_CASE_TIMEOUT }, (it) => {
  it('createItem starts an item at version 1 with a create entry; an existing id is left as is', async (s) => {
    const backend = await s.process();
    const first = await backend.createItem({ process: P, id: 'x', state: 'a', data: { n: 1 } });
    expect(first.created).toBe(true);
    expect(first.item).toMatchObject({ id: 'x', state: 'a', data: { n: 1 }, version: 1, attempts: 0, lastError: null, leaseOwner: null, leaseUntil: null });
    expect(first.item.createdAt).toBeInstanceOf(Date);
    const again = await backend.createItem({ process: P, id: 'x', state: 'b', data: { n: 2 } });
    expect(again.created).toBe(false);
    expect(again.item).toMatchObject({ state: 'a', data: { n: 1 }, version: 1 });
    const history = await backend.history(P, 'x');
    expect(history).toHaveLength(1);
    expect(history[0]).toMatchObject({ itemId: 'x', from: null, to: 'a', version: 1, kind: 'create', key: null, error: null });
    expect(history[0]!.at).toBeInstanceOf(Date);
    expect(await backend.getItem(P, 'missing')).toBeNull();
    expect(await backend.history(P, 'missing')).toEqual([]);
    // Processes are separate namespaces.
    expect(await backend.getItem('other', 'x')).toBeNull();
    expect((await backend.createItem({ process: 'other', id: 'x', state: 'z', data: {} })).created).toBe(true);
  });

  it('hostile item ids and JSON data round-trip exactly', async (s) => {
    const backend = await s.process();
    const hostile = ["it's", 'a%b_c', 'x\\y', '日本語', 'emoji 😀', ' spaced ', 'new\nline', 'a:b:c', '\u0000nul'];
    const data = { text: 'ünïcödé "quoted" \u0000', nested: { list: [1, 2.5, -3, true, null, 'x'] }, empty: {}, big: 2 ** 52 };
    for (const id of hostile) await backend.createItem({ process: P, id, state: 'a', data });
    for (const id of hostile) {
      const item = await backend.getItem(P, id);
      expect(item?.id).toBe(id);
      expect(item?.data).toEqual(data);
    }
  });

  it('invalid ids, names and data reject with typed errors and store nothing', async (s) => {
    const backend = await s.process();
    for (const [label, id] of INVALID_KEYS) {
      await expectReject(() => backend.createItem({ process: P, id: id as string, state: 'a', data: {} }), 'E_INVALID_KEY', `createItem(${label})`);
      await expectReject(() => backend.getItem(P, id as string), 'E_INVALID_KEY', `getItem(${label})`);
    }
    for (const name of ['', '1starts-with-digit', 'has space', 'quo"te', 'x'.repeat(64), 42]) {
      await expectReject(() => backend.createItem({ process: name as string, id: 'x', state: 'a', data: {} }), 'E_INVALID_OPTION', `process ${String(name)}`);
      await expectReject(() => backend.createItem({ process: P, id: 'x', state: name as string, data: {} }), 'E_INVALID_OPTION', `state ${String(name)}`);
    }
    for (const data of [null, [], 'text', 7, { date: new Date() }, { n: Number.NaN }]) {
      await expectReject(() => backend.createItem({ process: P, id: 'x', state: 'a', data: data as unknown as JsonObject }), 'E_INVALID_VALUE', `data ${String(data)}`);
    }
    await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 0, owner: 'o', lease: 1000 }), 'E_INVALID_OPTION', 'version 0');
    await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: '', lease: 1000 }), 'E_INVALID_OPTION', 'empty owner');
    await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: 0 }), 'E_INVALID_OPTION', 'lease 0');
    await expectReject(() => backend.listItems({ process: P, limit: 0 }), 'E_INVALID_OPTION', 'limit 0');
    await expectReject(
      () => backend.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'a', kind: 'advance', key: 'k' }),
      'E_INVALID_VALUE',
      'a transition to the same state',
    );
    expect(await backend.getItem(P, 'x')).toBeNull();
    expect(await backend.listItems({ process: P, limit: 10 })).toEqual([]);
  });

  it('listItems pages in id order and filters by state', async (s) => {
    const backend = await s.process();
    const all = ['b', 'a', 'c', 'é', 'A', 'aa'];
    for (const [index, id] of all.entries()) await backend.createItem({ process: P, id, state: index % 2 ? 'odd' : 'even', data: { index } });
    const sorted = ['A', 'a', 'aa', 'b', 'c', 'é'];
    expect((await backend.listItems({ process: P, limit: 100 })).map((item) => item.id)).toEqual(sorted);
    const page1 = await backend.listItems({ process: P, limit: 4 });
    const page2 = await backend.listItems({ process: P, limit: 4, after: page1.at(-1)!.id });
    expect([...page1, ...page2].map((item) => item.id)).toEqual(sorted);
    expect((await backend.listItems({ process: P, state: 'odd', limit: 100 })).map((item) => item.id)).toEqual(['a', 'aa', 'é']);
  });

  it('claim: exactly one of many parallel claimers wins, and attempts count claims', async (s) => {
    const backends = await Promise.all([1, 2, 3, 4].map(() => s.process()));
    await backends[0]!.createItem({ process: P, id: 'x', state: 'a', data: {} });
    const results = await parallel(12, (i) =>
      backends[i % backends.length]!.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: `owner-${i}`, lease: LONG_LEASE }),
    );
    const winners = results.filter((item) => item !== null);
    expect(winners).toHaveLength(1);
    expect(winners[0]).toMatchObject({ id: 'x', attempts: 1, version: 1 });
    expect(winners[0]!.leaseOwner).toMatch(/^owner-/);
    expect(winners[0]!.leaseUntil).toBeInstanceOf(Date);
    // Wrong state or version: nothing to claim.
    expect(await backends[0]!.claim({ process: P, itemId: 'x', state: 'b', version: 1, owner: 'other', lease: 1000 })).toBeNull();
    expect(await backends[0]!.claim({ process: P, itemId: 'x', state: 'a', version: 2, owner: 'other', lease: 1000 })).toBeNull();
    expect(await backends[0]!.claim({ process: P, itemId: 'missing', state: 'a', version: 1, owner: 'other', lease: 1000 })).toBeNull();
  });

  it('transition: exactly one of many parallel compare-and-sets applies, with its log entry', async (s) => {
    const backends = await Promise.all([1, 2, 3].map(() => s.process()));
    await backends[0]!.createItem({ process: P, id: 'x', state: 'a', data: { n: 0 } });
    await backends[0]!.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
    const results = await parallel(9, (i) =>
      backends[i % backends.length]!.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'b', data: { n: i }, kind: 'advance', key: `key-${i}` }),
    );
    const applied = results.filter((item) => item !== null);
    expect(applied).toHaveLength(1);
    const winner = applied[0]!;
    expect(winner).toMatchObject({ state: 'b', version: 2, attempts: 0, leaseOwner: null, leaseUntil: null, lastError: null });
    const history = await backends[0]!.history(P, 'x');
    expect(history).toHaveLength(2);
    expect(history[1]).toMatchObject({ from: 'a', to: 'b', version: 2, kind: 'advance', key: `key-${winner.data.n as number}` });
    // The stale version, or the wrong state, never applies again.
    expect(await backends[1]!.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'c', kind: 'advance', key: 'late' })).toBeNull();
    expect(await backends[1]!.transition({ process: P, itemId: 'x', from: 'c', version: 2, to: 'd', kind: 'advance', key: 'wrong' })).toBeNull();
    // Without data the data is kept; a dead-letter keeps its error.
    const dead = await backends[2]!.transition({ process: P, itemId: 'x', from: 'b', version: 2, to: 'failed', kind: 'dead-letter', key: 'k2', error: 'boom' });
    expect(dead).toMatchObject({ state: 'failed', version: 3, data: winner.data, lastError: 'boom' });
    expect((await backends[0]!.history(P, 'x'))[2]).toMatchObject({ kind: 'dead-letter', error: 'boom', key: 'k2' });
  });

  it('a stale version never applies, also once the item is back in the state it was read in', async (s) => {
    const backend = await s.process();
    const late = await s.process();
    await backend.createItem({ process: P, id: 'x', state: 'a', data: { n: 0 } });
    // a (version 1) -> b (2) -> a (3): the same state as at version 1, but another stay.
    expect(await backend.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'b', kind: 'advance', key: 'k1' })).toMatchObject({ version: 2 });
    expect(await backend.transition({ process: P, itemId: 'x', from: 'b', version: 2, to: 'a', kind: 'advance', key: 'k2' })).toMatchObject({ version: 3 });
    // A worker that read the first stay finishes late: the state matches, the version does not.
    expect(await late.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'late', lease: LONG_LEASE })).toBeNull();
    expect(await late.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'c', data: { n: 1 }, kind: 'advance', key: 'k1' })).toBeNull();
    expect(await late.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'failed', kind: 'dead-letter', key: 'k1', error: 'late' })).toBeNull();
    expect(await backend.getItem(P, 'x')).toMatchObject({ state: 'a', version: 3, data: { n: 0 }, lastError: null });
    expect((await backend.history(P, 'x')).map((entry) => entry.version)).toEqual([1, 2, 3]);
    // The current stay still moves on.
    expect(await late.transition({ process: P, itemId: 'x', from: 'a', version: 3, to: 'c', kind: 'advance', key: 'k3' })).toMatchObject({ state: 'c', version: 4 });
  });

  it('leases run out on the database clock; extend and release need the owner', async (s) => {
    const backend = await s.process();
    const other = await s.process();
    await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
    const claim = { process: P, itemId: 'x', state: 'a', version: 1, lease: SHORT_LEASE };
    expect(await backend.claim({ ...claim, owner: 'first' })).not.toBeNull();
    expect(await other.claim({ ...claim, owner: 'second' })).toBeNull();
    expect(await other.findClaimable({ process: P, state: 'a', includeUnclaimed: true, limit: 10 })).toEqual([]);
    await sleep(PAST_SHORT_LEASE);
    expect(await other.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'x', version: 1 }]);
    const second = await other.claim({ ...claim, owner: 'second' });
    expect(second).toMatchObject({ attempts: 2, leaseOwner: 'second' });
    const lease = { process: P, itemId: 'x', version: 1, lease: LONG_LEASE };
    expect(await backend.extendLease({ ...lease, owner: 'first' })).toBe(false);
    expect(await backend.release({ ...lease, owner: 'first', delay: 0, refundAttempt: false })).toBe(false);
    expect(await other.extendLease({ ...lease, owner: 'second' })).toBe(true);
    expect(await other.extendLease({ ...lease, version: 2, owner: 'second' })).toBe(false);
    expect((await other.getItem(P, 'x'))!.leaseOwner).toBe('second');
  });

  it('leases ignore a client clock that is ten minutes off', { exclusive: true, needs: ['serverClock'] }, async (s) => {
    const backend = await s.process();
    await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
    expect(await backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'first', lease: LONG_LEASE })).not.toBeNull();
    for (const offset of CLIENT_SKEWS) {
      await withClientSkew(async (skew) => {
        skew.set(offset);
        expect(await backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'second', lease: 1000 })).toBeNull();
        expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toEqual([]);
      });
    }
    await backend.createItem({ process: P, id: 'y', state: 'a', data: {} });
    await withClientSkew(async (skew) => {
      skew.set(CLIENT_SKEWS[1]);
      expect(await backend.claim({ process: P, itemId: 'y', state: 'a', version: 1, owner: 'o', lease: SHORT_LEASE })).not.toBeNull();
      skew.set(CLIENT_SKEWS[0]);
      expect(await backend.claim({ process: P, itemId: 'y', state: 'a', version: 1, owner: 'p', lease: SHORT_LEASE })).toBeNull();
    });
  });

  it('release: the item comes back after the delay; a refunded attempt is not counted', async (s) => {
    const backend = await s.process();
    await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
    const claim = { process: P, itemId: 'x', state: 'a', version: 1, lease: LONG_LEASE };
    await backend.claim({ ...claim, owner: 'o' });
    expect(await backend.release({ process: P, itemId: 'x', version: 1, owner: 'o', delay: SHORT_LEASE, refundAttempt: false, error: 'try later' })).toBe(true);
    expect(await backend.getItem(P, 'x')).toMatchObject({ attempts: 1, lastError: 'try later' });
    expect(await backend.claim({ ...claim, owner: 'p' })).toBeNull();
    await sleep(PAST_SHORT_LEASE);
    expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toHaveLength(1);
    expect(await backend.claim({ ...claim, owner: 'p' })).toMatchObject({ attempts: 2 });
    expect(await backend.release({ process: P, itemId: 'x', version: 1, owner: 'p', delay: 0, refundAttempt: true })).toBe(true);
    const handedBack = await backend.getItem(P, 'x');
    expect(handedBack).toMatchObject({ attempts: 1, lastError: 'try later' });
    // Handed back with no delay: claimable at once, and found by a recovery scan.
    expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'x' }]);
    expect(await backend.claim({ ...claim, owner: 'q' })).toMatchObject({ attempts: 2, leaseOwner: 'q' });
  });

  it('findClaimable: unclaimed items only when asked, expired claims always, never live ones', async (s) => {
    const backend = await s.process();
    for (const id of ['fresh', 'live', 'expired']) await backend.createItem({ process: P, id, state: 'a', data: {} });
    await backend.createItem({ process: P, id: 'elsewhere', state: 'b', data: {} });
    await backend.claim({ process: P, itemId: 'live', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
    await backend.claim({ process: P, itemId: 'expired', state: 'a', version: 1, owner: 'o', lease: SHORT_LEASE });
    await sleep(PAST_SHORT_LEASE);
    const scan = async (includeUnclaimed: boolean) =>
      (await backend.findClaimable({ process: P, state: 'a', includeUnclaimed, limit: 10 })).map((change) => change.itemId).sort();
    expect(await scan(false)).toEqual(['expired']);
    expect(await scan(true)).toEqual(['expired', 'fresh']);
    expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: true, limit: 1 })).toHaveLength(1);
    // Unclaimed items that have waited long enough (the engine's safety net for a late feed).
    const waitedFor = async (unclaimedFor: number) =>
      (await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, unclaimedFor, limit: 10 })).map((change) => change.itemId).sort();
    expect(await waitedFor(LONG_LEASE)).toEqual(['expired']);
    expect(await waitedFor(SHORT_LEASE)).toEqual(['expired', 'fresh']);
  });

  it('feed: items entering the state arrive in order, once, and a durable feed resumes after any position', async (s) => {
    const backend = await s.process();
    const other = await s.process();
    await backend.createItem({ process: P, id: 'before', state: 'a', data: {} });
    const feed = await backend.openFeed(P, 'a', null);
    if (!feed.durable) s.skip('the feed is not durable (a polling feed has no positions to resume)');
    expect(feed.resumed).toBe(false);
    const created = itemIds(5, 'feed');
    for (const id of created) await other.createItem({ process: P, id, state: 'a', data: {} });
    await other.createItem({ process: P, id: 'not-a', state: 'b', data: {} });
    await other.claim({ process: P, itemId: 'feed-000', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
    await other.transition({ process: P, itemId: 'feed-000', from: 'a', version: 1, to: 'b', kind: 'advance', key: 'k' });
    await other.transition({ process: P, itemId: 'feed-000', from: 'b', version: 2, to: 'a', kind: 'advance', key: 'k2' });
    const read: { itemId: string; version: number; position: string }[] = [];
    await waitUntil(async () => {
      read.push(...(await feed.read({ limit: 2, wait: 200 })));
      return read.length >= 6;
    }, 'the feed delivered six changes');
    expect(read.map((change) => `${change.itemId}@${change.version}`)).toEqual([...created.map((id) => `${id}@1`), 'feed-000@3']);
    expect(await feed.read({ limit: 10, wait: 50 })).toEqual([]);
    await feed.close();

    const resumed = await other.openFeed(P, 'a', read[1]!.position);
    expect(resumed.resumed).toBe(true);
    const again: string[] = [];
    await waitUntil(async () => {
      again.push(...(await resumed.read({ limit: 10, wait: 200 })).map((change) => `${change.itemId}@${change.version}`));
      return again.length >= 4;
    }, 'the resumed feed delivered four changes');
    expect(again).toEqual(read.slice(2).map((change) => `${change.itemId}@${change.version}`));
    await resumed.close();

    const atEnd = await other.openFeed(P, 'a', read.at(-1)!.position);
    expect(await atEnd.read({ limit: 10, wait: 50 })).toEqual([]);
    await backend.createItem({ process: P, id: 'later', state: 'a', data: {} });
    const later: string[] = [];
    await waitUntil(async () => {
      later.push(...(await atEnd.read({ limit: 10, wait: 200 })).map((change) => change.itemId));
      return later.length >= 1;
    }, 'the feed delivered a later change');
    expect(later).toEqual(['later']);
    await atEnd.close();
  });

  it('feed: a read waiting for changes returns the change made meanwhile', async (s) => {
    const backend = await s.process();
    const writer = await s.process();
    const feed = await backend.openFeed(P, 'a', null);
    // A feed with wake-ups answers this read as soon as the item is created; a polling one
    // answers after `wait` with nothing, and a later read has it.
    const waiting = feed.read({ limit: 10, wait: 5_000 });
    await sleep(50);
    await writer.createItem({ process: P, id: 'woken', state: 'a', data: {} });
    const all = await waiting;
    await waitUntil(async () => {
      if (all.length === 0) all.push(...(await feed.read({ limit: 10, wait: 200 })));
      return all.length > 0;
    }, 'the feed delivered the change');
    expect(all.map((change) => change.itemId)).toEqual(['woken']);
    expect(await feed.read({ limit: 10, wait: 50 })).toEqual([]);
    await feed.close();
  });

  it('close is idempotent and every call afterwards rejects with E_CLOSED', async (s) => {
    const backend = await s.process();
    await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
    const feed = await backend.openFeed(P, 'a', null);
    await backend.close();
    await backend.close();
    await expectReject(() => backend.getItem(P, 'x'), 'E_CLOSED', 'getItem');
    await expectReject(() => backend.createItem({ process: P, id: 'y', state: 'a', data: {} }), 'E_CLOSED', 'createItem');
    await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: 1000 }), 'E_CLOSED', 'claim');
    await expectReject(() => backend.openFeed(P, 'a', null), 'E_CLOSED', 'openFeed');
    await expectReject(() => feed.read({ limit: 1, wait: 0 }), 'E_CLOSED', 'feed.read');
    const other = await s.process();
    expect((await other.getItem(P, 'x'))?.id).toBe('x');
  });
});
