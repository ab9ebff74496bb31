import { expect } from 'vitest';
import type { Reservation } from '../../contracts/idempotency.js';
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
  realNow,
  sleep,
  withClientSkew,
  withinShortTtl,
} from '../helpers.js';

function tokenOf(reservation: Reservation): string {
  expect(reservation.status).toBe('acquired');
  return (reservation as { token: string }).token;
}

export const idempotencyCases = defineCases('IdempotencyStore', (it) => {
  it('get is null for a missing key; set then get returns the value without expiresAt', async (s) => {
    const store = await s.idempotency();
    expect(await store.get('missing')).toBeNull();
    await store.set('op', { charged: 42 });
    expect(await store.get('op')).toStrictEqual({ value: { charged: 42 } });
    await store.delete('op');
    await store.delete('op');
    expect(await store.get('op')).toBeNull();
  });

  it('set with a ttl reports expiresAt on the store clock and expires', async (s) => {
    const store = await s.idempotency();
    const key = await withinShortTtl(async (run) => {
      const key = `op:${run}`;
      await store.set(key, 'result', SHORT_TTL);
      const record = await store.get(key);
      expect(record?.value).toBe('result');
      expect(Math.abs(record!.expiresAt! - SHORT_TTL - realNow())).toBeLessThan(60_000);
      return key;
    });
    await sleep(PAST_SHORT_TTL);
    expect(await store.get(key)).toBeNull();
  });

  it('every JSON value round-trips as a result; non-JSON values reject with E_INVALID_VALUE', async (s) => {
    const store = await s.idempotency();
    await parallel(JSON_VALUES.length, (i) => store.set(`v${i}`, JSON_VALUES[i]![1]));
    for (const [i, [label, value]] of JSON_VALUES.entries()) expect((await store.get(`v${i}`))?.value, label).toStrictEqual(value);
    for (const [label, value] of NON_JSON_VALUES) {
      await expectReject(() => store.set('bad', value), 'E_INVALID_VALUE', `set(${label})`);
    }
    expect(await store.get('bad')).toBeNull();
  });

  it('reserve: the first caller acquires; while in flight others see in-flight and get reads null', async (s) => {
    const store = await s.idempotency();
    const first = await store.reserve('op', 10_000);
    expect(first).toMatchObject({ status: 'acquired', token: expect.any(String) });
    const second = await store.reserve('op', 10_000);
    expect(second.status).toBe('in-flight');
    expect(Math.abs((second as { expiresAt: number }).expiresAt - 10_000 - realNow())).toBeLessThan(60_000);
    expect(await store.get('op')).toBeNull();
  });

  it('reserve: of 20 concurrent callers exactly one acquires; after complete all see the result', async (s) => {
    const stores = await s.many(4, (session) => session.idempotency());
    const reservations = await parallel(20, (i) => stores[i % 4]!.reserve('op', 10_000));
    const acquired = reservations.filter((r) => r.status === 'acquired');
    expect(acquired).toHaveLength(1);
    expect(reservations.filter((r) => r.status === 'in-flight')).toHaveLength(19);
    await stores[1]!.complete('op', tokenOf(acquired[0]!), { orderId: 'o-1' });
    const after = await parallel(20, (i) => stores[i % 4]!.reserve('op', 10_000));
    for (const reservation of after) expect(reservation).toStrictEqual({ status: 'completed', value: { orderId: 'o-1' } });
    expect(await stores[2]!.get('op')).toStrictEqual({ value: { orderId: 'o-1' } });
  });

  it('complete with a ttl: the completed record expires and the key can be reserved again', async (s) => {
    const store = await s.idempotency();
    const key = await withinShortTtl(async (run) => {
      const key = `op:${run}`;
      const token = tokenOf(await store.reserve(key, 10_000));
      await store.complete(key, token, 'done', SHORT_TTL);
      const completed = await store.reserve(key, 10_000);
      expect(completed).toMatchObject({ status: 'completed', value: 'done', expiresAt: expect.any(Number) });
      return key;
    });
    await sleep(PAST_SHORT_TTL);
    expect(await store.get(key)).toBeNull();
    expect((await store.reserve(key, 10_000)).status).toBe('acquired');
  });

  it('fail drops the claim so a retry can reserve at once; a wrong token fails nothing', async (s) => {
    const store = await s.idempotency();
    const token = tokenOf(await store.reserve('op', 10_000));
    expect(await store.fail('op', 'not-the-token')).toBe(false);
    expect((await store.reserve('op', 10_000)).status).toBe('in-flight');
    expect(await store.fail('op', token)).toBe(true);
    expect(await store.fail('op', token)).toBe(false);
    const retry = await store.reserve('op', 10_000);
    expect(retry.status).toBe('acquired');
    expect(tokenOf(retry)).not.toBe(token);
    expect(await store.fail('never-reserved', token)).toBe(false);
  });

  it('complete needs the current token: a wrong or stale token is E_LOCK_NOT_OWNED', async (s) => {
    const store = await s.idempotency();
    const token = tokenOf(await store.reserve('op', 10_000));
    await expectReject(() => store.complete('op', 'not-the-token', 'x'), 'E_LOCK_NOT_OWNED', 'wrong token');
    await store.complete('op', token, 'first');
    await expectReject(() => store.complete('op', token, 'second'), 'E_LOCK_NOT_OWNED', 'complete twice');
    await expectReject(() => store.complete('never-reserved', token, 'x'), 'E_LOCK_NOT_OWNED', 'never reserved');
    expect(await store.get('op')).toStrictEqual({ value: 'first' });
    expect(await store.fail('op', token)).toBe(false);
    expect(await store.get('op')).toStrictEqual({ value: 'first' });
  });

  it('complete is safe to retry: the same result again resolves, as when the first answer was lost', async (s) => {
    const store = await s.idempotency();
    const token = tokenOf(await store.reserve('op', 10_000));
    await store.complete('op', token, { orderId: 'o-1' });
    // The caller saw E_UNAVAILABLE for the first call (applied, answer lost) and retries it.
    await store.complete('op', token, { orderId: 'o-1' });
    await expectReject(() => store.complete('op', token, { orderId: 'o-2' }), 'E_LOCK_NOT_OWNED', 'another result');
    expect(await store.get('op')).toStrictEqual({ value: { orderId: 'o-1' } });
  });

  it('an expired in-flight claim can be reserved again; the old token then owns nothing', async (s) => {
    const [a, b] = await s.many(2, (session) => session.idempotency());
    const stale = tokenOf(await a!.reserve('op', SHORT_TTL));
    await sleep(PAST_SHORT_TTL);
    const fresh = tokenOf(await b!.reserve('op', 10_000));
    expect(fresh).not.toBe(stale);
    await expectReject(() => a!.complete('op', stale, 'late'), 'E_LOCK_NOT_OWNED', 'complete with the expired token');
    expect(await a!.fail('op', stale)).toBe(false);
    expect((await a!.reserve('op', 10_000)).status).toBe('in-flight');
    await b!.complete('op', fresh, 'fresh result');
    expect(await a!.get('op')).toStrictEqual({ value: 'fresh result' });
  });

  it('a late complete succeeds while nobody else reserved the key', async (s) => {
    const store = await s.idempotency();
    const token = tokenOf(await store.reserve('op', SHORT_TTL));
    await sleep(PAST_SHORT_TTL);
    await store.complete('op', token, 'late but unchallenged');
    expect(await store.get('op')).toStrictEqual({ value: 'late but unchallenged' });
  });

  it('set overrides an in-flight claim; delete removes any record', async (s) => {
    const store = await s.idempotency();
    const token = tokenOf(await store.reserve('op', 10_000));
    await store.set('op', 'forced');
    expect(await store.reserve('op', 10_000)).toStrictEqual({ status: 'completed', value: 'forced' });
    await expectReject(() => store.complete('op', token, 'x'), 'E_LOCK_NOT_OWNED', 'complete after set');
    await store.delete('op');
    expect((await store.reserve('op', 10_000)).status).toBe('acquired');
  });

  it('hostile keys work; invalid keys, ttls and tokens are rejected', async (s) => {
    const store = await s.idempotency();
    const reservations = await parallel(HOSTILE_KEYS.length, (i) => store.reserve(HOSTILE_KEYS[i]!, 10_000));
    expect(reservations.every((r) => r.status === 'acquired')).toBe(true);
    expect((await store.reserve('underXscore', 10_000)).status).toBe('acquired');
    for (const [label, key] of INVALID_KEYS) {
      await expectReject(() => store.get(key as string), 'E_INVALID_KEY', `get(${label})`);
      await expectReject(() => store.set(key as string, 1), 'E_INVALID_KEY', `set(${label})`);
      await expectReject(() => store.delete(key as string), 'E_INVALID_KEY', `delete(${label})`);
      await expectReject(() => store.reserve(key as string, 1_000), 'E_INVALID_KEY', `reserve(${label})`);
      await expectReject(() => store.complete(key as string, 't', 1), 'E_INVALID_KEY', `complete(${label})`);
      await expectReject(() => store.fail(key as string, 't'), 'E_INVALID_KEY', `fail(${label})`);
    }
    for (const ttl of [0, -1, 1.5, undefined, '100']) {
      await expectReject(() => store.reserve('k', ttl as never), 'E_INVALID_OPTION', `reserve ttl ${String(ttl)}`);
    }
    await expectReject(() => store.set('k', 1, -5), 'E_INVALID_OPTION', 'set ttl -5');
    await expectReject(() => store.complete('k', '', 1), 'E_INVALID_OPTION', 'empty token');
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const stores = await s.many(5, (session) => session.idempotency());
    const results = await parallel(5, (i) => stores[i]!.reserve(`op-${i}`, 10_000));
    expect(results.every((r) => r.status === 'acquired')).toBe(true);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const store = await s.idempotency();
    await Promise.all([store.close(), store.close()]);
    await store.close();
    const calls: [string, () => unknown][] = [
      ['get', () => store.get('op')],
      ['set', () => store.set('op', 1)],
      ['delete', () => store.delete('op')],
      ['reserve', () => store.reserve('op', 1_000)],
      ['complete', () => store.complete('op', 'token', 1)],
      ['fail', () => store.fail('op', 'token')],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
  });

  it('skewed client clock: claims and results expire on the store clock', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.idempotency());
    await withClientSkew(async (skew) => {
      const run = await withinShortTtl(async (run) => {
        for (const offset of CLIENT_SKEWS) {
          skew.set(offset);
          tokenOf(await a!.reserve(`claim:${run}:${offset}`, 30_000));
          tokenOf(await a!.reserve(`short-claim:${run}:${offset}`, SHORT_TTL));
          await a!.set(`result:${run}:${offset}`, 'v', 30_000);
          await a!.set(`short-result:${run}:${offset}`, 'v', SHORT_TTL);
          skew.set(-offset);
          expect((await b!.reserve(`claim:${run}:${offset}`, 30_000)).status, `30 s claim made at ${offset} ms skew`).toBe('in-flight');
          expect(await b!.get(`result:${run}:${offset}`), `30 s result written at ${offset} ms skew`).toMatchObject({ value: 'v' });
          expect(await b!.get(`short-result:${run}:${offset}`)).toMatchObject({ value: 'v' });
        }
        return run;
      });
      await sleep(PAST_SHORT_TTL);
      for (const offset of CLIENT_SKEWS) {
        skew.set(-offset);
        expect((await b!.reserve(`short-claim:${run}:${offset}`, 30_000)).status, `expired claim made at ${offset} ms skew`).toBe('acquired');
        expect(await b!.get(`short-result:${run}:${offset}`), `expired result written at ${offset} ms skew`).toBeNull();
      }
    });
  });
});
