import { expect } from 'vitest';
import type { DatabaseTransaction } from '../../contracts/common.js';
import { bindProcess } from '../../process/bind.js';
import { defineCases } from '../harness.js';
import { expectReject, parallel, sleep } from '../helpers.js';
import { P, PROCESS_CASE_TIMEOUT, abProcess, expectAllFinished, waitUntil } from '../process-helpers.js';

/*
 * Stores inside the caller's own transaction (`withTransaction`), and the payoffs built on it:
 * `runOnce` (effect and idempotency record in one transaction) and transactional process
 * states (handler effects and the transition in one transaction). Every case needs the
 * `transactions` capability and an adapter that opens transactions as a user would
 * (`beginTransaction()`): the in-memory adapter has none.
 *
 * On a pool of one connection (PGlite) a store outside the transaction waits for that
 * connection, so the cases read outside a transaction only after it ended, and use every
 * store once before (its first call creates its table, on a connection of the pool).
 */
const needs = { needs: ['transactions' as const] };

/**
 * The pause between two writes of one transaction in the ttl cases. They compare the two
 * writes' expiry times with each other (one clock, no slack for load): a ttl counted from the
 * transaction's start gives both the same expiry, one counted from its statement puts them at
 * least this far apart.
 */
const WRITE_GAP = 300;
/** Timers may fire up to a millisecond early; stored times are whole milliseconds. */
const TIMER_SLACK = 2;

/** The view of `store` inside `transaction`; a store without `withTransaction` fails the case. */
function inTransaction<T extends { withTransaction?(transaction: DatabaseTransaction): T }>(store: T, transaction: DatabaseTransaction): T {
  expect(typeof store.withTransaction, 'withTransaction on a store of a database with transactions').toBe('function');
  return store.withTransaction!(transaction);
}

export const keyValueTransactionCases = defineCases('KeyValueStore', needs, (it) => {
  it('withTransaction: reads see the transaction’s writes; a rollback leaves nothing and burns no version', async (s) => {
    const kv = await s.kv();
    await kv.set('kept', 'before');
    const read = (await kv.getEntry('kept'))!;
    const tx = await s.transaction();
    const view = inTransaction(kv, tx.transaction);
    await view.set('new', 'n');
    await view.setMany([{ key: 'a', value: '1' }, { key: 'b', value: '2' }]);
    await view.compareAndSet('kept', 'changed', read.version);
    expect(await view.getMany(['new', 'a', 'b', 'kept'])).toEqual(['n', '1', '2', 'changed']);
    expect(await view.delete('a')).toBe(true);
    expect(await view.get('a')).toBeNull();
    await tx.rollback();
    expect(await kv.getMany(['new', 'a', 'b', 'kept'])).toEqual([null, null, null, 'before']);
    // The version read before the rolled-back write still decides the next compare-and-set.
    await kv.compareAndSet('kept', 'after', read.version);
    expect(await kv.get('kept')).toBe('after');
  });

  it('withTransaction: writes are visible to everyone once the caller commits', async (s) => {
    const [kv, other] = await s.many(2, (session) => session.kv());
    expect(await kv!.get('a')).toBeNull();
    const tx = await s.transaction();
    const view = inTransaction(kv!, tx.transaction);
    await view.set('a', '1');
    await view.compareAndSet('b', '2', null);
    await tx.commit();
    expect(await other!.getMany(['a', 'b'])).toEqual(['1', '2']);
    // The view is not a store of its own: closing it closes nothing.
    await view.close();
    expect(await kv!.get('a')).toBe('1');
  });

  it('withTransaction: a ttl counts from the statement that writes it, not from the transaction’s start', async (s) => {
    const kv = await s.kv();
    expect(await kv.get('first')).toBeNull();
    const tx = await s.transaction();
    const view = inTransaction(kv, tx.transaction);
    await view.set('first', 'v', { ttl: 60_000 });
    await sleep(WRITE_GAP);
    await view.setMany([{ key: 'second', value: 'v', ttl: 60_000 }]);
    await sleep(WRITE_GAP);
    await view.set('third', 'v', { ttl: 60_000 });
    await tx.commit();
    const [first, second, third] = await Promise.all(['first', 'second', 'third'].map(async (key) => (await kv.getEntry(key))!.expiresAt!.getTime()));
    expect(second! - first!, 'setMany a pause after set').toBeGreaterThanOrEqual(WRITE_GAP - TIMER_SLACK);
    expect(third! - second!, 'set a pause after setMany').toBeGreaterThanOrEqual(WRITE_GAP - TIMER_SLACK);
  });

  it('withTransaction refuses what is not a transaction with E_INVALID_OPTION', async (s) => {
    const kv = await s.kv();
    for (const bad of [null, undefined, 'client', 42]) {
      expect(() => kv.withTransaction!(bad as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
  });
});

export const snapshotTransactionCases = defineCases('SnapshotStore', needs, (it) => {
  it('withTransaction: a save rolled back leaves the snapshot and its version as they were', async (s) => {
    const snapshots = await s.snapshots();
    await snapshots.save('wf', { step: 1 });
    const read = (await snapshots.loadVersioned('wf'))!;
    const tx = await s.transaction();
    const view = inTransaction(snapshots, tx.transaction);
    await view.save('wf', { step: 2 }, { expectedVersion: read.version });
    await view.save('other', { step: 1 });
    expect(await view.load('wf')).toEqual({ step: 2 });
    await tx.rollback();
    expect(await snapshots.load('wf')).toEqual({ step: 1 });
    expect(await snapshots.load('other')).toBeNull();
    await snapshots.save('wf', { step: 3 }, { expectedVersion: read.version });
    expect(await snapshots.load('wf')).toEqual({ step: 3 });
  });
});

export const checkpointTransactionCases = defineCases('CheckpointStore', needs, (it) => {
  it('withTransaction: checkpoints commit or roll back with the caller’s transaction', async (s) => {
    const checkpoints = await s.checkpoints();
    const checkpoint = (sequence: number) => ({ id: `cp-${sequence}`, taskId: 't', sequence, timestamp: sequence, progress: sequence * 10, data: { sequence } });
    expect(await checkpoints.list('t')).toEqual([]);
    for (const outcome of ['rollback', 'commit'] as const) {
      const tx = await s.transaction();
      const view = inTransaction(checkpoints, tx.transaction);
      await view.save(checkpoint(outcome === 'rollback' ? 1 : 2));
      expect((await view.loadLatest('t'))?.id).toBe(outcome === 'rollback' ? 'cp-1' : 'cp-2');
      await tx[outcome]();
    }
    expect((await checkpoints.list('t')).map((saved) => saved.id)).toEqual(['cp-2']);
  });

  it('withTransaction: a duplicate checkpoint is E_VERSION_CONFLICT and the caller’s transaction still commits its other writes', async (s) => {
    const checkpoints = await s.checkpoints();
    const checkpoint = (id: string, sequence: number) => ({ id, taskId: 't', sequence, timestamp: sequence, progress: sequence * 10, data: { sequence } });
    expect(await checkpoints.list('t')).toEqual([]);
    const tx = await s.transaction();
    const view = inTransaction(checkpoints, tx.transaction);
    await view.save(checkpoint('cp-1', 1));
    await expectReject(() => view.save(checkpoint('cp-1', 2)), 'E_VERSION_CONFLICT', 'the same id again');
    await expectReject(() => view.save(checkpoint('cp-other', 1)), 'E_VERSION_CONFLICT', 'the same sequence again');
    await view.save(checkpoint('cp-2', 2));
    await tx.commit();
    expect((await checkpoints.list('t')).map((saved) => saved.id)).toEqual(['cp-1', 'cp-2']);
  });
});


export const idempotencyTransactionCases = defineCases('IdempotencyStore', needs, (it) => {
  it('withTransaction: a completion rolled back leaves no result, and the key can be reserved again', async (s) => {
    const store = await s.idempotency();
    expect(await store.get('op')).toBeNull();
    const tx = await s.transaction();
    const view = inTransaction(store, tx.transaction);
    const reservation = await view.reserve('op', 60_000);
    expect(reservation.status).toBe('acquired');
    await view.complete('op', (reservation as { token: string }).token, { charged: 1 });
    expect(await view.get('op')).toEqual({ value: { charged: 1 } });
    await tx.rollback();
    expect(await store.get('op')).toBeNull();
    expect((await store.reserve('op', 60_000)).status).toBe('acquired');
  });

  it('runOnce: the effect and the result commit together; later calls get the result without running', async (s) => {
    s.needsTransactions();
    const [store, kv] = [await s.idempotency(), await s.kv()];
    expect(await kv.get('effect')).toBeNull();
    expect(typeof store.runOnce, 'runOnce on a store of a database with transactions').toBe('function');
    let runs = 0;
    const charge = (transaction: DatabaseTransaction) => {
      runs++;
      return inTransaction(kv, transaction)
        .set('effect', `charged ${runs}`)
        .then(() => ({ charged: runs }));
    };
    expect(await store.runOnce!('op', charge)).toEqual({ charged: 1 });
    expect(await store.runOnce!('op', charge)).toEqual({ charged: 1 });
    expect(runs).toBe(1);
    expect(await kv.get('effect')).toBe('charged 1');
    expect(await store.get('op')).toEqual({ value: { charged: 1 } });
  });

  it('runOnce: when the function fails, neither its effect nor a record remains, and the next call runs it', async (s) => {
    s.needsTransactions();
    const [store, kv] = [await s.idempotency(), await s.kv()];
    expect(await kv.get('effect')).toBeNull();
    const failure = new Error('card declined');
    await expect(
      store.runOnce!('op', async (transaction) => {
        await inTransaction(kv, transaction).set('effect', 'half done');
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await kv.get('effect')).toBeNull();
    expect(await store.get('op')).toBeNull();
    expect(await store.runOnce!('op', async () => 'second')).toBe('second');
  });

  it('runOnce: a function that returns nothing completes; later calls resolve undefined without running it', async (s) => {
    s.needsTransactions();
    const [store, kv] = [await s.idempotency(), await s.kv()];
    expect(await kv.get('effect')).toBeNull();
    let runs = 0;
    const notify = async (transaction: DatabaseTransaction): Promise<void> => {
      runs++;
      await inTransaction(kv, transaction).set('effect', `sent ${runs}`);
    };
    expect(await store.runOnce!('op', notify)).toBeUndefined();
    expect(await store.runOnce!('op', notify)).toBeUndefined();
    expect(runs).toBe(1);
    expect(await kv.get('effect')).toBe('sent 1');
    expect(await store.get('op')).toStrictEqual({ value: undefined });
  });

  it('runOnce: the result’s ttl counts from the end of the function, not from the transaction’s start', async (s) => {
    s.needsTransactions();
    const [store, kv] = [await s.idempotency(), await s.kv()];
    expect(await kv.get('started')).toBeNull();
    await store.runOnce!(
      'op',
      async (transaction) => {
        await inTransaction(kv, transaction).set('started', 'v', { ttl: 60_000 });
        await sleep(WRITE_GAP);
        return 'done';
      },
      { ttl: 60_000 },
    );
    const started = (await kv.getEntry('started'))!.expiresAt!.getTime();
    const result = (await store.get('op'))!;
    expect(result.value).toBe('done');
    expect(result.expiresAt! - started).toBeGreaterThanOrEqual(WRITE_GAP - TIMER_SLACK);
  });

  it('runOnce: of 8 concurrent calls on one key the function runs once, and every caller gets its result', async (s) => {
    s.needsTransactions();
    const stores = await s.many(2, (session) => session.idempotency());
    const kv = await s.kv();
    expect(await kv.exists('effect/0')).toBe(false);
    let runs = 0;
    const results = await parallel(8, (i) =>
      stores[i % 2]!.runOnce!('op', async (transaction) => {
        runs++;
        await inTransaction(kv, transaction).set(`effect/${i}`, 'applied');
        return { by: i };
      }),
    );
    expect(runs).toBe(1);
    expect(new Set(results.map((result) => JSON.stringify(result))).size).toBe(1);
    expect((await kv.keys('effect/*')).length).toBe(1);
  });

  it('runOnce rejects a bad key or function with E_INVALID_KEY / E_INVALID_OPTION, and a key a reserve() holds with E_LOCK_NOT_OWNED', async (s) => {
    s.needsTransactions();
    const store = await s.idempotency();
    await expectReject(() => store.runOnce!('', async () => 1), 'E_INVALID_KEY');
    await expectReject(() => store.runOnce!('op', 'not a function' as never), 'E_INVALID_OPTION');
    await store.reserve('held', 60_000);
    await expectReject(() => store.runOnce!('held', async () => 1), 'E_LOCK_NOT_OWNED');
  });
});

export const lockTransactionCases = defineCases('LockProvider', needs, (it) => {
  it('withTransaction is refused with E_INVALID_OPTION: a lease taken in a transaction would vanish on rollback', async (s) => {
    const locks = (await s.locks()) as unknown as { withTransaction(transaction: object): unknown };
    const tx = await s.transaction();
    expect(() => locks.withTransaction(tx.transaction)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });
});

export const processTransactionCases = defineCases('ProcessBackend', { ...needs, timeout: PROCESS_CASE_TIMEOUT }, (it) => {
  it('a transactional state: a failed attempt’s writes roll back; the successful one commits with the transition', { exclusive: true }, async (s) => {
    const backend = await s.process();
    s.needsTransactions();
    const kv = await s.kv();
    expect(await kv.keys('effect/*')).toEqual([]);
    const { definition } = abProcess(
      {
        a: async (item, context) => {
          expect(context.transaction).toBeDefined();
          await inTransaction(kv, context.transaction!).set(`effect/${item.id}/${context.attempt}`, 'written');
          if (context.attempt === 1) throw new Error('first attempt fails after writing');
          return 'b';
        },
      },
      { transactional: true },
    );
    const bound = bindProcess(backend, definition);
    const worker = s.worker(bound, { name: 'tx', cursors: await s.cursors() });
    await worker.start();
    await bound.start('item', {});
    await waitUntil(async () => (await bound.get('item'))?.state === 'done', 'the item is done');
    await expectAllFinished(bound, ['item']);
    expect(await kv.keys('effect/*')).toEqual(['effect/item/2']);
  });

  it('withTransaction: items written through the backend’s view roll back with the transaction; a feed is refused there', async (s) => {
    const backend = await s.process();
    const tx = await s.transaction();
    const view = inTransaction(backend, tx.transaction);
    await view.createItem({ process: P, id: 'inside', state: 'a', data: {} });
    expect((await view.getItem(P, 'inside'))?.state).toBe('a');
    await expectReject(() => view.openFeed(P, 'a', null), 'E_INVALID_OPTION');
    await tx.rollback();
    expect(await backend.getItem(P, 'inside')).toBeNull();
  });
});

export const processWithoutTransactionCases = defineCases('ProcessBackend', (it) => {
  it('a worker with a transactional state starts where the backend begins transactions, and refuses with E_INVALID_OPTION elsewhere', async (s) => {
    const backend = await s.process();
    const begins = typeof backend.transaction === 'function' && (await backend.transaction(async () => true).catch(() => false));
    const { definition } = abProcess({}, { transactional: true });
    const worker = s.worker(bindProcess(backend, definition), { name: 'tx-start', cursors: await s.cursors() });
    if (begins) await worker.start();
    else await expectReject(() => worker.start(), 'E_INVALID_OPTION');
  });
});

/** The names of every case above (test helpers: adapters without transactions skip them). */
export const TRANSACTION_CASE_NAMES: ReadonlySet<string> = new Set(
  [keyValueTransactionCases, snapshotTransactionCases, checkpointTransactionCases, idempotencyTransactionCases, lockTransactionCases, processTransactionCases, processWithoutTransactionCases].flatMap(
    (set) => set.cases.map((conformanceCase) => conformanceCase.name),
  ),
);
