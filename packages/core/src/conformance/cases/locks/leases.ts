/**
 * LockProvider cases: acquiring, owners, extending and releasing, expiry on the store clock,
 * fences, forceRelease.
 */
import { expect } from 'vitest';
import type { LockHandle } from '../../../contracts/locks.js';
import { defineCases } from '../../harness.js';
import { LONG_TTL, PAST_SHORT_TTL, SHORT_TTL, parallel, sleep } from '../../helpers.js';

export const leaseCases = defineCases('LockProvider', (it) => {
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
});
