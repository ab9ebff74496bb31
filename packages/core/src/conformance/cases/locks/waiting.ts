/**
 * LockProvider cases: waiting acquisitions (woken by a release or by polling, or running out of
 * time), an AbortSignal or close() ending them, and withLock once its signal has aborted.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import { LONG_TTL, SHORT_TTL, expectReject, lookalikeErrors, sleep } from '../../helpers.js';

export const waitingCases = defineCases('LockProvider', (it) => {
  it('waiting acquire gets the lock once the holder releases it', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const holder = await a!.acquire('job', LONG_TTL);
    const waiting = b!.acquire('job', LONG_TTL, { wait: 10_000, pollInterval: 25 });
    await sleep(100);
    await holder!.release();
    const handle = await waiting;
    expect(handle).not.toBeNull();
    expect(await handle!.isValid()).toBe(true);
  });

  it('waiting acquire gets the lock once the holder lease expires', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    await a!.acquire('job', SHORT_TTL);
    const handle = await b!.acquire('job', LONG_TTL, { wait: 10_000, pollInterval: 50 });
    expect(handle).not.toBeNull();
  });

  it('waiting acquire resolves null after wait when the lock stays held', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    await a!.acquire('job', LONG_TTL);
    expect(await b!.acquire('job', LONG_TTL, { wait: 300, pollInterval: 50 })).toBeNull();
  });

  it('waiting acquire is woken by release, not only by polling', { needs: ['wakeups'] }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const holder = await a!.acquire('job', LONG_TTL, 'holder');
    // Polling alone would only look again when `wait` ends; by then the holder has the lock back.
    const waiting = b!.acquire('job', LONG_TTL, { owner: 'waiter', wait: 4_000, pollInterval: 60_000 });
    await sleep(200);
    await holder!.release();
    await sleep(2_000);
    const retaken = await a!.acquire('job', LONG_TTL, 'holder');
    const handle = await waiting;
    expect(handle?.owner ?? null, 'the waiter should have been woken by the release').toBe('waiter');
    expect(retaken).toBeNull();
  });

  it('waiters of one provider take the lock in turn, each handed it by the release before (no poll needed)', async (s) => {
    const locks = await s.locks();
    const holder = await locks.acquire('job', LONG_TTL);
    // Polls are a minute apart and `wait` ends first: only the provider's own hand-off can grant these.
    const order: number[] = [];
    const waiters = Array.from({ length: 16 }, async (_, index) => {
      const handle = await locks.acquire('job', LONG_TTL, { wait: 20_000, pollInterval: 60_000 });
      expect(handle, `waiter ${index} was granted`).not.toBeNull();
      order.push(index);
      await handle!.release();
    });
    await sleep(50);
    await holder!.release();
    await Promise.all(waiters);
    expect(order, 'in the order they asked').toEqual(Array.from({ length: 16 }, (_, index) => index));
  });

  it('AbortSignal stops a waiting acquire with the signal reason', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    await a!.acquire('job', LONG_TTL);
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const waiting = b!.acquire('job', LONG_TTL, { wait: 10_000, signal: controller.signal });
    setTimeout(() => controller.abort(reason), 100);
    await expect(waiting).rejects.toBe(reason);
    // The aborted waiter must not take the lock later behind the caller's back.
    await a!.forceRelease('job');
    await sleep(200);
    expect(await a!.acquire('job', LONG_TTL, 'after-abort')).not.toBeNull();
    const already = AbortSignal.abort(reason);
    await expect(b!.acquire('free', LONG_TTL, { wait: 1_000, signal: already })).rejects.toBe(reason);
  });

  it('abort is final: an acquisition aborted while an attempt was in flight leaves no lease behind', async (s) => {
    const [holder, waiter] = await s.many(2, (session) => session.locks());
    // The release lets the waiter's next attempt succeed; the abort lands around the same
    // moment, at a different point each round: a few microtasks later (a fast backend's attempt
    // is in flight for that long) or a few milliseconds later (a database's round trip).
    let abortedRounds = 0;
    for (let round = 0; round < 40; round++) {
      const key = `race:${round}`;
      const held = await holder!.acquire(key, LONG_TTL, 'holder');
      const controller = new AbortController();
      const reason = new Error(`gave up ${round}`);
      const waiting = waiter!.acquire(key, LONG_TTL, { owner: 'waiter', wait: 10_000, pollInterval: 5, signal: controller.signal });
      let settled = false;
      let abortedFirst = false;
      void waiting.then(
        () => (settled = true),
        () => (settled = true),
      );
      await sleep(1);
      const releasing = held!.release();
      const fromTimer = round % 2 === 1;
      let aborting: Promise<void>;
      if (fromTimer) {
        // From a timer, the order is certain: a promise settled before the timer fired has
        // already run its callbacks.
        aborting = sleep(round % 5).then(() => {
          abortedFirst = !settled;
          controller.abort(reason);
        });
      } else {
        let chain = Promise.resolve();
        for (let i = 0; i < round % 8; i++) chain = chain.then(() => undefined);
        aborting = chain.then(() => controller.abort(reason));
      }
      const outcome = await waiting.then(
        (handle) => ({ handle }),
        (error: unknown) => ({ error }),
      );
      await Promise.all([releasing, aborting]);
      if ('error' in outcome) {
        abortedRounds++;
        expect(outcome.error, `round ${round}`).toBe(reason);
        expect(await waiter!.release(key, 'waiter'), `round ${round}: the aborted acquire left a lease behind`).toBe(false);
        expect(await holder!.acquire(key, LONG_TTL, 'after'), `round ${round}`).not.toBeNull();
      } else {
        expect(fromTimer && abortedFirst, `round ${round}: acquire resolved with a lease after its signal aborted`).toBe(false);
        expect(outcome.handle?.owner, `round ${round}`).toBe('waiter');
      }
    }
    expect(abortedRounds, 'the abort never won a race').toBeGreaterThan(0);
  });

  it('an aborted re-acquisition by the owner keeps the lease that owner already held', async (s) => {
    const [holder, other] = await s.many(2, (session) => session.locks());
    for (let round = 0; round < 8; round++) {
      const key = `held:${round}`;
      const held = await holder!.acquire(key, LONG_TTL, 'owner-a');
      const controller = new AbortController();
      const reason = new Error(`gave up ${round}`);
      // The attempt is in flight (a renewal of owner-a's lease) when the signal aborts: at once,
      // or a few microtasks later.
      const again = holder!.acquire(key, LONG_TTL, { owner: 'owner-a', signal: controller.signal });
      if (round === 0) controller.abort(reason);
      let chain = Promise.resolve();
      for (let i = 0; i < round; i++) chain = chain.then(() => undefined);
      await chain.then(() => controller.abort(reason));
      await again.then(
        (handle) => expect(handle?.fence, `round ${round}: a renewal keeps the fence`).toBe(held!.fence),
        (error: unknown) => expect(error, `round ${round}`).toBe(reason),
      );
      expect(await held!.isValid(), `round ${round}: the lease held before the call was released`).toBe(true);
      expect(await other!.acquire(key, LONG_TTL, 'owner-b'), `round ${round}: another owner took the held lock`).toBeNull();
    }
  });

  it('a first waiter aborted around a release does not take that release from the waiter behind it', async (s) => {
    const locks = await s.locks();
    // Polls are a minute apart and the second waiter's wait ends first: only the hand-off
    // within the provider can grant it, also when the first in line gives up as it is woken.
    for (let round = 0; round < 12; round++) {
      const key = `line:${round}`;
      const held = await locks.acquire(key, LONG_TTL, 'holder');
      const controller = new AbortController();
      const reason = new Error(`first gave up ${round}`);
      const first = locks.acquire(key, LONG_TTL, { wait: 20_000, pollInterval: 60_000, signal: controller.signal });
      first.catch(() => undefined);
      await sleep(20);
      const second = locks.acquire(key, LONG_TTL, { wait: 10_000, pollInterval: 60_000 });
      await sleep(20);
      const releasing = held!.release();
      let chain = Promise.resolve();
      for (let i = 0; i < round; i++) chain = chain.then(() => undefined);
      await chain.then(() => controller.abort(reason));
      await releasing;
      const firstHandle = await first.catch(() => null);
      await firstHandle?.release();
      const secondHandle = await second;
      expect(secondHandle, `round ${round}: the second waiter was never handed the lock`).not.toBeNull();
      await secondHandle!.release();
    }
  });

  it('withLock never starts fn once its signal has aborted', async (s) => {
    const [holder, waiter] = await s.many(2, (session) => session.locks());
    const reason = new Error('caller gave up');
    let startedAfterAbort = 0;
    for (let round = 0; round < 20; round++) {
      const key = `job:${round}`;
      const held = await holder!.acquire(key, LONG_TTL, 'holder');
      const controller = new AbortController();
      const run = waiter!.withLock(key, async () => void (controller.signal.aborted && startedAfterAbort++), {
        ttl: LONG_TTL,
        wait: 10_000,
        pollInterval: 5,
        signal: controller.signal,
      });
      // Rejects at the abort, possibly while the release below is still on the wire: handled now, checked below.
      run.catch(() => undefined);
      await sleep(1);
      const releasing = held!.release();
      let chain = Promise.resolve();
      for (let i = 0; i < round % 8; i++) chain = chain.then(() => undefined);
      await chain.then(() => controller.abort(reason));
      await releasing;
      await run.catch((error: unknown) => expect(error).toBe(reason));
      expect(await holder!.acquire(key, LONG_TTL, 'after'), `round ${round}: a lease was left behind`).not.toBeNull();
    }
    expect(startedAfterAbort, 'fn ran although the signal had aborted').toBe(0);
    let started = false;
    await expect(waiter!.withLock('free', async () => void (started = true), { ttl: LONG_TTL, signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(started).toBe(false);
  });

  it("withLock's function's own error and an abort signal's reason reach the caller unchanged, even ones that look like a database's", async (s) => {
    const [holder, waiter] = await s.many(2, (session) => session.locks());
    await holder!.acquire('held', LONG_TTL, 'holder');
    for (const [label, error] of lookalikeErrors()) {
      await expect(waiter!.withLock('free', () => Promise.reject(error), { ttl: LONG_TTL }), `fn: ${label}`).rejects.toBe(error);
      await expect(waiter!.acquire('held', LONG_TTL, { wait: 10_000, signal: AbortSignal.abort(error) }), `abort: ${label}`).rejects.toBe(error);
      const controller = new AbortController();
      const waiting = waiter!.acquire('held', LONG_TTL, { wait: 10_000, signal: controller.signal });
      await sleep(5);
      controller.abort(error);
      await expect(waiting, `abort while waiting: ${label}`).rejects.toBe(error);
    }
    expect(await waiter!.acquire('free', LONG_TTL), 'withLock released the lock').not.toBeNull();
  });

  it('close() ends a waiting acquisition with E_CLOSED and resolves once it has', async (s) => {
    const [holder, waiter] = await s.many(2, (session) => session.locks());
    await holder!.acquire('job', LONG_TTL, 'holder');
    const waiting = waiter!.acquire('job', LONG_TTL, { wait: 30_000 });
    await sleep(100);
    let settled = false;
    void waiting.then(
      () => (settled = true),
      () => (settled = true),
    );
    await waiter!.close();
    expect(settled, 'close() resolved before the waiting acquire settled').toBe(true);
    await expectReject(() => waiting, 'E_CLOSED', 'acquire waiting during close');
  });
});
