/**
 * LockProvider cases: hostile and invalid input, concurrent first use, close and leaked handles,
 * a skewed client clock.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  LONG_TTL,
  PAST_SHORT_TTL,
  SHORT_TTL,
  errorCode,
  expectReject,
  parallel,
  sleep,
  withClientSkew,
} from '../../helpers.js';

export const lifecycleCases = defineCases('LockProvider', (it) => {
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
