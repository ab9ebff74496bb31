import { expect } from 'vitest';
import type { LockHandle } from '../../contracts/locks.js';
import { defineCases } from '../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  LONG_TTL,
  PAST_SHORT_TTL,
  SHORT_TTL,
  realNow,
  errorCode,
  expectReject,
  lookalikeErrors,
  parallel,
  sleep,
  withClientSkew,
} from '../helpers.js';

/** Resolves when `signal` aborts, or rejects after `ms` so a case never hangs. */
function aborted(signal: AbortSignal, ms: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => reject(new Error(`signal was not aborted within ${ms} ms`)), ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve(signal.reason);
    });
  });
}

export const lockCases = defineCases('LockProvider', (it) => {
  it('acquire returns a handle; a second owner gets null while it is held', async (s) => {
    const locks = await s.locks();
    const handle = await locks.acquire('job', LONG_TTL, 'owner-a');
    expect(handle).not.toBeNull();
    expect(handle!.key).toBe('job');
    expect(handle!.owner).toBe('owner-a');
    expect(Number.isSafeInteger(handle!.fence) && handle!.fence > 0).toBe(true);
    expect(handle!.expiresAt).toBeInstanceOf(Date);
    expect(await handle!.isValid()).toBe(true);
    expect(await locks.acquire('job', LONG_TTL, 'owner-b')).toBeNull();
    expect(await locks.acquire('job', LONG_TTL)).toBeNull();
    expect(await locks.acquire('other-job', LONG_TTL, 'owner-b')).not.toBeNull();
  });

  it('acquire without an owner generates a unique one; options object form works', async (s) => {
    const locks = await s.locks();
    const a = await locks.acquire('a', LONG_TTL);
    const b = await locks.acquire('b', LONG_TTL, {});
    const c = await locks.acquire('c', LONG_TTL, { owner: 'named' });
    expect(a!.owner).toEqual(expect.any(String));
    expect(a!.owner.length).toBeGreaterThan(0);
    expect(a!.owner).not.toBe(b!.owner);
    expect(c!.owner).toBe('named');
  });

  it('exclusivity: of 50 parallel acquirers on 5 provider instances exactly one wins', { needs: ['atomicUpdates'] }, async (s) => {
    const providers = await s.many(5, (session) => session.locks());
    const handles = await parallel(50, (i) => providers[i % 5]!.acquire('contended', LONG_TTL, `owner-${i}`));
    const winners = handles.filter((handle): handle is LockHandle => handle !== null);
    expect(winners).toHaveLength(1);
    for (const provider of providers) {
      expect(await provider.acquire('contended', LONG_TTL, 'late-owner')).toBeNull();
    }
    await winners[0]!.release();
    const after = await parallel(50, (i) => providers[i % 5]!.acquire('contended', LONG_TTL, `second-${i}`));
    expect(after.filter((handle) => handle !== null)).toHaveLength(1);
  });

  it('owner checks: extend and release by another owner return false and change nothing', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const handle = await a!.acquire('job', 5_000, 'owner-a');
    expect(await b!.extend('job', LONG_TTL, 'owner-b')).toBe(false);
    expect(await b!.release('job', 'owner-b')).toBe(false);
    expect(await handle!.isValid()).toBe(true);
    expect(await b!.acquire('job', LONG_TTL, 'owner-b')).toBeNull();
    expect(await b!.extend('job', LONG_TTL, 'owner-a')).toBe(true); // the owner token is what counts
    expect(await b!.release('job', 'owner-a')).toBe(true);
    expect(await handle!.isValid()).toBe(false);
    expect(await a!.release('job', 'owner-a')).toBe(false);
    expect(await a!.extend('free-key', LONG_TTL, 'owner-a')).toBe(false);
  });

  it('re-acquire by the same owner renews the lease and keeps the fence', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const first = await a!.acquire('job', SHORT_TTL, 'owner-a');
    const again = await b!.acquire('job', LONG_TTL, 'owner-a');
    expect(again).not.toBeNull();
    expect(again!.fence).toBe(first!.fence);
    expect(again!.expiresAt.getTime()).toBeGreaterThan(first!.expiresAt.getTime());
    await sleep(PAST_SHORT_TTL);
    expect(await a!.acquire('job', LONG_TTL, 'owner-b')).toBeNull(); // the renewed lease still holds
  });

  it('handle.extend moves expiresAt; handle.release frees the lock; release twice is quiet', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const handle = await a!.acquire('job', SHORT_TTL);
    const before = handle!.expiresAt.getTime();
    expect(await handle!.extend(LONG_TTL)).toBe(true);
    expect(handle!.expiresAt.getTime()).toBeGreaterThan(before);
    await sleep(PAST_SHORT_TTL);
    expect(await handle!.isValid()).toBe(true);
    expect(await b!.acquire('job', LONG_TTL)).toBeNull();
    await handle!.release();
    await handle!.release();
    expect(await handle!.isValid()).toBe(false);
    expect(await b!.acquire('job', LONG_TTL)).not.toBeNull();
  });

  it('expiry: a lease ends on the store clock; extend, isValid and release then fail quietly', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const handle = await a!.acquire('job', SHORT_TTL, 'owner-a');
    await sleep(PAST_SHORT_TTL);
    expect(await handle!.isValid()).toBe(false);
    expect(await handle!.extend(LONG_TTL)).toBe(false);
    expect(await a!.extend('job', LONG_TTL, 'owner-a')).toBe(false);
    const taken = await b!.acquire('job', LONG_TTL, 'owner-b');
    expect(taken).not.toBeNull();
    expect(await handle!.extend(LONG_TTL)).toBe(false);
    await handle!.release(); // must not release owner-b's lease
    expect(await taken!.isValid()).toBe(true);
    expect(await a!.acquire('job', LONG_TTL, 'owner-c')).toBeNull();
  });

  it('fence strictly increases across release, expiry, forceRelease and new provider instances', { needs: ['fencing'] }, async (s) => {
    const a = await s.locks();
    const fences: number[] = [];
    const take = async (provider = a, ttl = LONG_TTL) => {
      const handle = await provider.acquire('fenced', ttl);
      expect(handle).not.toBeNull();
      fences.push(handle!.fence);
      return handle!;
    };
    await (await take()).release();
    await take(a, SHORT_TTL);
    await sleep(PAST_SHORT_TTL); // expired, never released
    await take();
    await a.forceRelease('fenced');
    // The same owner again after its lease ran out: a new acquisition, so a new fence.
    await a.acquire('fenced', SHORT_TTL, 'same-owner').then((handle) => fences.push(handle!.fence));
    await sleep(PAST_SHORT_TTL);
    await a.acquire('fenced', LONG_TTL, 'same-owner').then((handle) => fences.push(handle!.fence));
    await a.forceRelease('fenced');
    await take();
    await a.forceRelease('fenced');
    await a.close();
    const b = await s.locks();
    await take(b);
    await b.forceRelease('fenced');
    const [c] = await s.many(1, (session) => session.locks());
    await take(c);
    for (let i = 1; i < fences.length; i++) expect(fences[i], `fences ${fences.join(', ')}`).toBeGreaterThan(fences[i - 1]!);
  });

  it('fence: concurrent winners over time get distinct increasing fences', { needs: ['fencing', 'atomicUpdates'] }, async (s) => {
    const providers = await s.many(3, (session) => session.locks());
    const fences: number[] = [];
    for (let round = 0; round < 5; round++) {
      const handles = await parallel(9, (i) => providers[i % 3]!.acquire('fenced', LONG_TTL));
      const winners = handles.filter((handle): handle is LockHandle => handle !== null);
      expect(winners).toHaveLength(1);
      fences.push(winners[0]!.fence);
      await winners[0]!.release();
    }
    expect(new Set(fences).size).toBe(fences.length);
    expect([...fences].sort((x, y) => x - y)).toEqual(fences);
  });

  it('forceRelease frees a lock held by anyone; the old handle sees it lost', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const handle = await a!.acquire('job', LONG_TTL);
    await b!.forceRelease('job');
    await b!.forceRelease('job');
    await b!.forceRelease('never-held');
    expect(await handle!.isValid()).toBe(false);
    expect(await handle!.extend(LONG_TTL)).toBe(false);
    expect(await b!.acquire('job', LONG_TTL)).not.toBeNull();
  });

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

  it('await using releases the lock at the end of the block', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    {
      await using handle = await a!.acquire('job', LONG_TTL);
      expect(handle).not.toBeNull();
      expect(await b!.acquire('job', LONG_TTL)).toBeNull();
    }
    expect(await b!.acquire('job', LONG_TTL)).not.toBeNull();
  });

  it('withLock runs fn with the handle and releases afterwards, also when fn throws', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const result = await a!.withLock(
      'job',
      async (signal, handle) => {
        expect(signal.aborted).toBe(false);
        expect(handle.key).toBe('job');
        expect(await b!.acquire('job', LONG_TTL)).toBeNull();
        return 42;
      },
      { ttl: 5_000 },
    );
    expect(result).toBe(42);
    const failure = new Error('fn failed');
    await expect(a!.withLock('job', async () => Promise.reject(failure), { ttl: 5_000 })).rejects.toBe(failure);
    const handle = await b!.acquire('job', LONG_TTL);
    expect(handle).not.toBeNull();
    await expectReject(() => a!.withLock('job', async () => 1, { ttl: 5_000, wait: 200 }), 'E_LOCK_BUSY', 'withLock on a held lock');
    await expectReject(() => a!.withLock('job', async () => 1, { ttl: 5_000 }), 'E_LOCK_BUSY', 'withLock on a held lock, default wait');
  });

  it('withLock extends the lease while fn runs past the ttl', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    // A lease of 2 s extended every 200 ms: an event-loop stall of up to 1.8 s on a loaded
    // machine leaves it alive (the point is the extension, not the timing). fn runs until the
    // lease has outlived its ttl, and the handle's expiry shows the extensions.
    const ttl = 2_000;
    const result = await a!.withLock(
      'job',
      async (signal, handle) => {
        const firstExpiry = handle.expiresAt.getTime();
        const started = realNow();
        while (realNow() - started < ttl + 200) {
          await sleep(400);
          expect(await b!.acquire('job', LONG_TTL), 'another owner while fn runs').toBeNull();
        }
        expect(handle.expiresAt.getTime(), 'the lease was extended past its first expiry').toBeGreaterThan(firstExpiry);
        expect(await handle.isValid()).toBe(true);
        expect(signal.aborted).toBe(false);
        return 'done';
      },
      { ttl, extendEvery: ttl / 10 },
    );
    expect(result).toBe('done');
    expect(await b!.acquire('job', LONG_TTL)).not.toBeNull();
  });

  it('withLock aborts the signal with E_LOCK_LOST and rejects when the lease is lost', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    let reason: unknown;
    const run = a!.withLock(
      'job',
      async (signal) => {
        await b!.forceRelease('job');
        await b!.acquire('job', LONG_TTL, 'thief');
        reason = await aborted(signal, 10_000);
        return 'finished anyway';
      },
      { ttl: 2_000, extendEvery: 50 },
    );
    await expectReject(() => run, 'E_LOCK_LOST', 'withLock after forceRelease');
    expect(errorCode(reason)).toBe('E_LOCK_LOST');
    // Ending withLock must not release the lock the thief now holds.
    expect(await b!.release('job', 'thief')).toBe(true);
  });

  it('hostile keys lock independently; invalid keys, ttls and owners are rejected', async (s) => {
    const locks = await s.locks();
    const handles = await parallel(HOSTILE_KEYS.length, (i) => locks.acquire(HOSTILE_KEYS[i]!, LONG_TTL, 'owner'));
    expect(handles.every((handle) => handle !== null)).toBe(true);
    for (const key of HOSTILE_KEYS) expect(await locks.acquire(key, LONG_TTL, 'other'), JSON.stringify(key)).toBeNull();
    expect(await locks.acquire('under_score'.replace('_', 'X'), LONG_TTL, 'other')).not.toBeNull();
    for (const [label, key] of INVALID_KEYS) {
      await expectReject(() => locks.acquire(key as string, LONG_TTL), 'E_INVALID_KEY', `acquire(${label})`);
      await expectReject(() => locks.extend(key as string, LONG_TTL, 'o'), 'E_INVALID_KEY', `extend(${label})`);
      await expectReject(() => locks.release(key as string, 'o'), 'E_INVALID_KEY', `release(${label})`);
      await expectReject(() => locks.forceRelease(key as string), 'E_INVALID_KEY', `forceRelease(${label})`);
    }
    for (const ttl of [0, -1, 1.5, Number.NaN, '100']) {
      await expectReject(() => locks.acquire('k', ttl as never), 'E_INVALID_OPTION', `ttl ${String(ttl)}`);
      await expectReject(() => locks.extend('k', ttl as never, 'o'), 'E_INVALID_OPTION', `extend ttl ${String(ttl)}`);
    }
    await expectReject(() => locks.acquire('k', LONG_TTL, ''), 'E_INVALID_OPTION', 'empty owner');
    // Owners are stored as they are: a U+0000 (which PostgreSQL text cannot hold) is refused everywhere alike.
    await expectReject(() => locks.acquire('k', LONG_TTL, 'a\u0000b'), 'E_INVALID_OPTION', 'owner with U+0000');
    await expectReject(() => locks.release('k', 'a\u0000b'), 'E_INVALID_OPTION', 'release by an owner with U+0000');
    await expectReject(() => locks.acquire('k', LONG_TTL, { wait: -1 }), 'E_INVALID_OPTION', 'negative wait');
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const providers = await s.many(5, (session) => session.locks());
    const handles = await parallel(5, (i) => providers[i]!.acquire(`first:${i}`, LONG_TTL));
    expect(handles.every((handle) => handle !== null)).toBe(true);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const locks = await s.locks();
    await Promise.all([locks.close(), locks.close()]);
    await locks.close();
    const calls: [string, () => unknown][] = [
      ['acquire', () => locks.acquire('k', LONG_TTL)],
      ['extend', () => locks.extend('k', LONG_TTL, 'o')],
      ['release', () => locks.release('k', 'o')],
      ['forceRelease', () => locks.forceRelease('k')],
      ['withLock', () => locks.withLock('k', async () => 1, { ttl: LONG_TTL })],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
  });

  it('leaked handles: after close, handle calls reject with E_CLOSED or do nothing harmful', async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    const handle = await a!.acquire('job', LONG_TTL, 'owner-a');
    await a!.close();
    for (const [name, call] of [
      ['extend', () => handle!.extend(LONG_TTL)],
      ['isValid', () => handle!.isValid()],
      ['release', () => handle!.release()],
    ] as const) {
      try {
        await call();
      } catch (error) {
        expect(errorCode(error), `handle.${name}() after close`).toBe('E_CLOSED');
      }
    }
    await handle![Symbol.asyncDispose](); // disposal after close never throws E_CLOSED
    // Whatever happened, the lock is either still owner-a's or free; never corrupted.
    const next = await b!.acquire('job', LONG_TTL, 'owner-b');
    if (next === null) expect(await b!.release('job', 'owner-a')).toBe(true);
  });

  it('skewed client clock: leases follow the store clock, not Date', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    await withClientSkew(async (skew) => {
      for (const offset of CLIENT_SKEWS) {
        skew.set(offset);
        const held = await a!.acquire(`held:${offset}`, 30_000, 'owner-a');
        await a!.acquire(`short:${offset}`, SHORT_TTL, 'owner-a');
        skew.set(-offset);
        expect(await b!.acquire(`held:${offset}`, LONG_TTL, 'owner-b'), `30 s lease taken at ${offset} ms skew`).toBeNull();
        expect(await held!.isValid()).toBe(true);
        expect(await held!.extend(30_000)).toBe(true);
      }
      await sleep(PAST_SHORT_TTL);
      for (const offset of CLIENT_SKEWS) {
        skew.set(-offset);
        const taken = await b!.acquire(`short:${offset}`, LONG_TTL, 'owner-b');
        expect(taken, `expired ${SHORT_TTL} ms lease taken at ${offset} ms skew`).not.toBeNull();
      }
    });
  });
});
