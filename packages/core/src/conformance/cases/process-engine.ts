import { expect } from 'vitest';
import { hasCapability } from '../../capabilities.js';
import type { ProcessEvent, ProcessWorkerOptions } from '../../contracts/process.js';
import { bindProcess } from '../../process/bind.js';
import { DEFAULT_CURSOR_PREFIX, cursorKey } from '../../process/worker.js';
import { defineCases } from '../harness.js';
import { expectReject, parallel, sleep } from '../helpers.js';
import {
  P,
  PROCESS_CASE_TIMEOUT,
  abProcess,
  allFinished,
  deferred,
  expectAllFinished,
  historyProblems,
  itemIds,
  waitUntil,
} from '../process-helpers.js';

/*
 * The process engine (`bindProcess`, workers) on the adapter's ProcessBackend: whole
 * processes with retries, dead-letters, several workers, killed and restarted workers, and
 * graceful shutdown. Workers keep their cursors in the adapter's `kv()`; the session stops
 * every worker a case started when the case ends.
 */

export const processEngineCases = defineCases('ProcessBackend', { timeout: PROCESS_CASE_TIMEOUT }, (it) => {
  it('a process runs every item through its states to a terminal state, once', { exclusive: true }, async (s) => {
    const { definition, calls } = abProcess({
      a: async (item) => ({ to: 'b', data: { ...item.data, visited: ['a'] } }),
    });
    const bound = bindProcess(await s.process(), definition);
    const items = itemIds(20);
    for (const id of items.slice(0, 10)) await bound.start(id, { id });
    const worker = s.worker(bound, { name: 'solo', cursors: await s.cursors() });
    await worker.start();
    for (const id of items.slice(10)) await bound.start(id, { id });
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
    await expectAllFinished(bound, items);
    expect((await bound.get('item-000'))!.data).toEqual({ id: 'item-000', visited: ['a'] });
    expect(calls.duplicates()).toEqual([]);
    for (const id of items) {
      const [a, b] = [calls.of(id, 'a')[0]!, calls.of(id, 'b')[0]!];
      const history = await bound.history(id);
      expect(history.map((entry) => entry.key)).toEqual([null, a.key, b.key]);
      expect(a.key).not.toBe(b.key);
    }
    await worker.stop();
  });

  it('failures are retried with backoff under one idempotency key, then dead-lettered', { exclusive: true }, async (s) => {
    const { definition, calls } = abProcess(
      {
        a: async (item, context) => {
          if (item.id === 'poison') throw new Error(`poison attempt ${context.attempt}`);
          if (item.id === 'flaky' && context.attempt < 3) throw new Error('flaky');
          return 'b';
        },
      },
      { maxAttempts: 3 },
    );
    const bound = bindProcess(await s.process(), definition);
    const events: ProcessEvent[] = [];
    const worker = s.worker(bound, { name: 'retrier', cursors: await s.cursors(), onEvent: (event) => events.push(event) });
    await worker.start();
    for (const id of ['poison', 'flaky', 'fine']) await bound.start(id, {});
    await waitUntil(() => allFinished(bound, ['poison', 'flaky', 'fine']), 'every item finished');
    const poison = (await bound.get('poison'))!;
    expect(poison.state).toBe('failed');
    expect(poison.lastError).toContain('poison attempt 3');
    const poisonCalls = calls.of('poison', 'a');
    expect(poisonCalls.map((call) => call.attempt)).toEqual([1, 2, 3]);
    expect(new Set(poisonCalls.map((call) => call.key)).size).toBe(1);
    const history = await bound.history('poison');
    expect(history.at(-1)).toMatchObject({ from: 'a', to: 'failed', kind: 'dead-letter', key: poisonCalls[0]!.key });
    expect(history.at(-1)!.error).toContain('poison attempt 3');
    expect(historyProblems(history, definition.terminal)).toEqual([]);
    expect(calls.of('flaky', 'a').map((call) => call.attempt)).toEqual([1, 2, 3]);
    await expectAllFinished(bound, ['flaky', 'fine']);
    expect(events.filter((event) => event.type === 'retry' && event.itemId === 'poison')).toHaveLength(2);
    expect(events.filter((event) => event.type === 'dead-lettered')).toMatchObject([{ itemId: 'poison', attempt: 3 }]);
    await worker.stop();
  });

  it('a handler returning an unknown state fails the attempt; { wait } runs it again without counting', { exclusive: true }, async (s) => {
    let waits = 0;
    const { definition, calls } = abProcess(
      {
        a: async (item) => {
          if (item.id === 'lost') return 'nowhere';
          if (item.id === 'patient' && waits < 2) {
            waits++;
            return { wait: 30 };
          }
          return 'b';
        },
      },
      { maxAttempts: 2 },
    );
    const bound = bindProcess(await s.process(), definition);
    const worker = s.worker(bound, { name: 'checker', cursors: await s.cursors() });
    await worker.start();
    await bound.start('lost', {});
    await bound.start('patient', {});
    await waitUntil(() => allFinished(bound, ['lost', 'patient']), 'both finished');
    expect(await bound.get('lost')).toMatchObject({ state: 'failed' });
    expect((await bound.get('lost'))!.lastError).toContain('nowhere');
    expect(calls.of('lost', 'a')).toHaveLength(2);
    expect(calls.of('patient', 'a').map((call) => call.attempt)).toEqual([1, 1, 1]);
    await expectAllFinished(bound, ['patient']);
    await worker.stop();
  });

  it('several workers on the same states never advance an item twice', { exclusive: true }, async (s) => {
    const { definition, calls } = abProcess({
      a: async () => {
        await sleep(Math.floor(Math.random() * 10));
        return 'b';
      },
      b: async () => {
        await sleep(Math.floor(Math.random() * 10));
        return 'done';
      },
    });
    const backend = await s.process();
    const bound = bindProcess(backend, definition);
    const items = itemIds(40);
    // One backend and cursor store per worker, like three OS processes.
    const workers = [];
    for (const name of ['w0', 'w1', 'w2']) {
      workers.push(s.worker(bindProcess(await s.process(), definition), { name, cursors: await s.cursors() }));
    }
    await Promise.all(workers.map((worker) => worker.start()));
    await parallel(items.length, (i) => bound.start(items[i]!, {}));
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
    await expectAllFinished(bound, items);
    // No crash: where updates are atomic a claim is exclusive, so no handler ran twice either.
    // Without atomic updates (FerretDB 1.x) a claim taken over as its lease ends may be delivered
    // again (at least once); the histories above still show every item advanced exactly once.
    if (hasCapability(backend.capabilities, 'atomicUpdates')) expect(calls.duplicates()).toEqual([]);
    await Promise.all(workers.map((worker) => worker.stop()));
  });

  it('a killed worker loses nothing: its claimed items are retried once its leases run out', { exclusive: true }, async (s) => {
    const stuck = deferred();
    let killed = false;
    const { definition, calls } = abProcess(
      {
        a: async (_item, context) => {
          if (context.worker === 'victim' && !killed) await stuck.promise;
          return 'b';
        },
      },
      { concurrency: 3 },
    );
    const bound = bindProcess(await s.process(), definition);
    const items = itemIds(12);
    for (const id of items) await bound.start(id, {});
    // The victim runs only "a"; it claims three items and hangs in all three handlers.
    const victimBackend = await s.process();
    const victimCursors = await s.cursors();
    const victim = s.worker(bindProcess(victimBackend, definition), { name: 'victim', states: ['a'], cursors: victimCursors, shutdownTimeout: 0 });
    await victim.start();
    await waitUntil(() => calls.calls.filter((call) => call.worker === 'victim').length === 3, 'the victim is in three handlers');
    const inFlight = calls.calls.filter((call) => call.worker === 'victim').map((call) => call.item);

    // "Kill" it: its connections go away, so nothing it does from now on reaches the database.
    killed = true;
    await victimBackend.close();
    await victimCursors.close();
    void victim.stop();

    // The same worker restarted, and a helper; they finish everything.
    const restarted = s.worker(bindProcess(await s.process(), definition), { name: 'victim', cursors: await s.cursors() });
    const helper = s.worker(bindProcess(await s.process(), definition), { name: 'helper', cursors: await s.cursors() });
    await Promise.all([restarted.start(), helper.start()]);
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
    stuck.resolve(); // the killed worker's handlers return into a closed backend
    await sleep(50);
    await expectAllFinished(bound, items);
    const duplicates = calls.duplicates();
    // Exactly the items in flight at the kill ran twice (at-least-once), each in state "a" only.
    expect(duplicates.map((call) => call.item).sort()).toEqual([...inFlight].sort());
    expect(duplicates.every((call) => call.state === 'a' && call.attempt === 2)).toBe(true);
    for (const id of inFlight) {
      const keys = calls.of(id, 'a').map((call) => call.key);
      expect(new Set(keys).size, `one idempotency key for both deliveries of ${id}`).toBe(1);
    }
    await Promise.all([restarted.stop(), helper.stop()]);
  });

  it('a restarted worker resumes from its cursor: completed items are not handed to it again', { exclusive: true }, async (s) => {
    const { definition, calls } = abProcess({});
    const bound = bindProcess(await s.process(), definition);
    const cursors = await s.cursors();
    const opened: ProcessEvent[] = [];
    const onEvent = (event: ProcessEvent) => event.type === 'feed-opened' && opened.push(event);
    const first = s.worker(bound, { name: 'resumer', cursors, onEvent });
    await first.start();
    const before = itemIds(6, 'before');
    for (const id of before) await bound.start(id, {});
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 100 })).length === before.length, 'the first batch is done');
    await first.stop();
    const durable = opened.every((event) => event.type === 'feed-opened' && event.durable);
    if (durable) {
      for (const state of ['a', 'b']) {
        const stored = await cursors.get(cursorKey(DEFAULT_CURSOR_PREFIX, P, state, 'resumer'));
        expect(stored, `cursor of state ${state}`).not.toBeNull();
      }
    }

    const after = itemIds(6, 'after');
    for (const id of after) await bound.start(id, {});
    opened.length = 0;
    const second = s.worker(bindProcess(await s.process(), definition), { name: 'resumer', cursors, onEvent });
    await second.start();
    expect(opened).toHaveLength(2);
    for (const event of opened) {
      expect(event).toMatchObject({ type: 'feed-opened', resumed: true });
      if (durable) expect((event as { position: string | null }).position).not.toBeNull();
    }
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 100 })).length === before.length + after.length, 'the second batch is done');
    await expectAllFinished(bound, [...before, ...after]);
    // Nothing finished before the restart reached a handler again.
    expect(calls.calls.filter((call) => before.includes(call.item))).toHaveLength(before.length * 2);
    expect(calls.duplicates()).toEqual([]);
    await second.stop();
  });

  it('graceful shutdown lets handlers finish, or hands their items back at once when out of time', { exclusive: true }, async (s) => {
    const release = deferred();
    const { definition, calls } = abProcess({
      a: async (item, context) => {
        if (item.id === 'slow') {
          // Ends only when the worker aborts it.
          await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }));
          if (context.worker === 'leaving') return 'b';
        }
        if (item.id === 'quick') await release.promise;
        return 'b';
      },
    });
    const bound = bindProcess(await s.process(), definition);
    const events: ProcessEvent[] = [];
    const leaving = s.worker(bound, { name: 'leaving', states: ['a'], cursors: await s.cursors(), shutdownTimeout: 300, onEvent: (event) => events.push(event) });
    await leaving.start();
    await bound.start('slow', {});
    await bound.start('quick', {});
    await waitUntil(() => calls.calls.length === 2, 'both handlers run');
    const stopping = leaving.stop();
    release.resolve(); // "quick" finishes within the grace period
    await stopping;
    expect(await bound.get('quick')).toMatchObject({ state: 'b' });
    expect(events.filter((event) => event.type === 'handed-back')).toMatchObject([{ itemId: 'slow', version: 1 }]);
    expect(events.at(-1)).toMatchObject({ type: 'stopped', handedBack: 1 });
    // Handed back: claimable now (no lease to wait out), and the attempt was refunded.
    const slow = (await bound.get('slow'))!;
    expect(slow).toMatchObject({ state: 'a', attempts: 0 });
    expect(await bound.backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'slow' }]);
    const next = s.worker(bindProcess(await s.process(), definition), { name: 'next', cursors: await s.cursors(), shutdownTimeout: 0 });
    await next.start();
    await waitUntil(async () => (await bound.list({ state: 'done', limit: 10 })).length === 1, '"quick" is done');
    // "slow" is in flight again on the next worker, as its first counted attempt.
    await waitUntil(() => calls.of('slow').length === 2, '"slow" is delivered again');
    expect(calls.of('slow').at(-1)).toMatchObject({ worker: 'next', attempt: 1 });
    await next.stop();
  });

  it('worker options are validated', async (s) => {
    const { definition } = abProcess({});
    const bound = bindProcess(await s.process(), definition);
    const cursors = await s.cursors();
    const bad: [string, Partial<ProcessWorkerOptions>][] = [
      ['no name', { name: '' }],
      ['a name with a space', { name: 'a b' }],
      ['no cursors', { cursors: undefined as never }],
      ['an unknown state', { states: ['nope'] }],
      ['a terminal state', { states: ['done'] }],
      ['concurrency 0', { concurrency: { a: 0 } }],
      ['pollInterval 0', { pollInterval: 0 }],
    ];
    for (const [label, options] of bad) {
      expect(() => bound.worker({ name: 'w', cursors, ...options }), label).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    await expectReject(() => bound.start('x', {}, { state: 'done' as never }), 'E_INVALID_OPTION', 'start in a terminal state');
  });
});
