/**
 * LockProvider cases: `await using` and withLock — releasing after fn, extending the lease while
 * fn runs, aborting fn's signal when the lease is lost.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import { LONG_TTL, realNow, errorCode, expectReject, sleep } from '../../helpers.js';

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

export const withLockCases = defineCases('LockProvider', (it) => {
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

  // The lease is stolen while extensions every 50 ms are in flight. A server without atomic
  // updates (FerretDB 1.x: an update is a read, then a separate write of the document) can let an
  // extension that read before the theft write the old owner back after it: the theft is lost
  // and the lease never is (seen on a loaded run). Such a server's locks are not to be relied on
  // (capabilities.atomicUpdates false), as the exclusivity cases say.
  it('withLock aborts the signal with E_LOCK_LOST and rejects when the lease is lost', { needs: ['atomicUpdates'] }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.locks());
    let reason: unknown;
    const run = a!.withLock(
      'job',
      async (signal) => {
        await b!.forceRelease('job');
        await b!.acquire('job', LONG_TTL, 'thief');
        // A liveness bound, not a timing: the abort comes with the first extension after the
        // theft (every 50 ms), which a loaded machine and server may delay by seconds.
        reason = await aborted(signal, 20_000);
        return 'finished anyway';
      },
      { ttl: 2_000, extendEvery: 50 },
    );
    await expectReject(() => run, 'E_LOCK_LOST', 'withLock after forceRelease');
    expect(errorCode(reason)).toBe('E_LOCK_LOST');
    // Ending withLock must not release the lock the thief now holds.
    expect(await b!.release('job', 'thief')).toBe(true);
  });
});
