import { expect } from 'vitest';
import { defineCases } from '../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  PAST_SHORT_TTL,
  SHORT_TTL,
  expectReject,
  parallel,
  realNow,
  sleep,
  withClientSkew,
} from '../helpers.js';

/** Store-clock times should be near the real time (the database runs on a real clock). */
const NEAR_NOW = 60_000;

export const circuitBreakerCases = defineCases('CircuitBreakerStore', (it) => {
  it('getState is null until something is recorded', async (s) => {
    const breaker = await s.circuitBreaker();
    expect(await breaker.getState('svc')).toBeNull();
  });

  it("setState then getState round-trips go-go-scope's state shape", async (s) => {
    const breaker = await s.circuitBreaker();
    const state = { state: 'half-open' as const, failureCount: 3, lastFailureTime: 1_700_000_000_000, lastSuccessTime: 1_600_000_000_000 };
    await breaker.setState('svc', state);
    expect(await breaker.getState('svc')).toStrictEqual(state);
    await breaker.setState('svc', { state: 'closed', failureCount: 0 });
    expect(await breaker.getState('svc')).toStrictEqual({ state: 'closed', failureCount: 0 });
  });

  it('recordFailure counts up and opens the circuit when the count reaches maxFailures', async (s) => {
    const breaker = await s.circuitBreaker();
    expect(await breaker.recordFailure('svc', 3)).toBe(1);
    expect(await breaker.getState('svc')).toMatchObject({ state: 'closed', failureCount: 1 });
    const state = await breaker.getState('svc');
    expect(Math.abs(state!.lastFailureTime! - realNow())).toBeLessThan(NEAR_NOW);
    expect(await breaker.recordFailure('svc', 3)).toBe(2);
    expect((await breaker.getState('svc'))!.state).toBe('closed');
    expect(await breaker.recordFailure('svc', 3)).toBe(3);
    expect(await breaker.getState('svc')).toMatchObject({ state: 'open', failureCount: 3 });
    expect(await breaker.recordFailure('svc', 3)).toBe(4);
    expect(await breaker.getState('svc')).toMatchObject({ state: 'open', failureCount: 4 });
  });

  it('recordFailure continues from a state written with setState; a stored open past openUntil reads half-open', async (s) => {
    const breaker = await s.circuitBreaker();
    await breaker.setState('svc', { state: 'closed', failureCount: 4 });
    expect(await breaker.recordFailure('svc', 5)).toBe(5);
    expect((await breaker.getState('svc'))!.state).toBe('open');
    await breaker.setState('old', { state: 'open', failureCount: 3, lastFailureTime: 1_000, openUntil: 2_000 });
    expect(await breaker.getState('old')).toStrictEqual({ state: 'half-open', failureCount: 3, lastFailureTime: 1_000, openUntil: 2_000 });
  });

  it('recordSuccess closes the circuit and resets the count', async (s) => {
    const breaker = await s.circuitBreaker();
    await breaker.recordFailure('svc', 1);
    await breaker.recordSuccess('svc');
    const state = await breaker.getState('svc');
    expect(state).toMatchObject({ state: 'closed', failureCount: 0 });
    expect(Math.abs(state!.lastSuccessTime! - realNow())).toBeLessThan(NEAR_NOW);
    expect(state!.openUntil).toBeUndefined();
    expect(await breaker.recordFailure('svc', 2)).toBe(1);
    await breaker.recordSuccess('fresh');
    expect(await breaker.getState('fresh')).toMatchObject({ state: 'closed', failureCount: 0 });
  });

  it('20 concurrent recordFailure calls lose no increment and exactly one sees the transition', { needs: ['atomicUpdates'] }, async (s) => {
    const breakers = await s.many(4, (session) => session.circuitBreaker());
    const maxFailures = 5;
    const counts = await parallel(20, (i) => breakers[i % 4]!.recordFailure('svc', maxFailures, { cooldown: 60_000 }));
    expect([...counts].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(counts.filter((count) => count === maxFailures)).toHaveLength(1);
    expect(await breakers[0]!.getState('svc')).toMatchObject({ state: 'open', failureCount: 20 });
  });

  it('cooldown: an opened circuit reads half-open after openUntil on the store clock', async (s) => {
    const breaker = await s.circuitBreaker();
    await breaker.recordFailure('svc', 2, { cooldown: SHORT_TTL });
    expect((await breaker.getState('svc'))!.state).toBe('closed');
    await breaker.recordFailure('svc', 2, { cooldown: SHORT_TTL });
    const open = await breaker.getState('svc');
    expect(open!.state).toBe('open');
    expect(open!.openUntil! - open!.lastFailureTime!).toBe(SHORT_TTL);
    await sleep(PAST_SHORT_TTL);
    expect((await breaker.getState('svc'))!.state).toBe('half-open');
    await breaker.recordSuccess('svc');
    expect(await breaker.getState('svc')).toMatchObject({ state: 'closed', failureCount: 0 });
  });

  it('cooldown: a failure while half-open opens the circuit again for another cooldown', async (s) => {
    const breaker = await s.circuitBreaker();
    await breaker.recordFailure('svc', 1, { cooldown: SHORT_TTL });
    await sleep(PAST_SHORT_TTL);
    expect((await breaker.getState('svc'))!.state).toBe('half-open');
    expect(await breaker.recordFailure('svc', 1, { cooldown: 60_000 })).toBe(2);
    const reopened = await breaker.getState('svc');
    expect(reopened!.state).toBe('open');
    expect(reopened!.openUntil! - reopened!.lastFailureTime!).toBe(60_000);
  });

  it('without a cooldown an opened circuit stays open until a success', async (s) => {
    const breaker = await s.circuitBreaker();
    await breaker.recordFailure('svc', 1);
    await sleep(PAST_SHORT_TTL);
    const state = await breaker.getState('svc');
    expect(state!.state).toBe('open');
    expect(state!.openUntil).toBeUndefined();
  });

  it('delete forgets the circuit; keys are independent, hostile keys work', async (s) => {
    const breaker = await s.circuitBreaker();
    await parallel(HOSTILE_KEYS.length, (i) => breaker.recordFailure(HOSTILE_KEYS[i]!, 10));
    await breaker.recordFailure('under_score', 10);
    for (const key of HOSTILE_KEYS) {
      expect((await breaker.getState(key))!.failureCount, JSON.stringify(key)).toBe(key === 'under_score' ? 2 : 1);
    }
    await breaker.delete('under_score');
    await breaker.delete('never-recorded');
    expect(await breaker.getState('under_score')).toBeNull();
    expect(await breaker.getState('underXscore')).toBeNull();
  });

  it('invalid keys, states and options are rejected', async (s) => {
    const breaker = await s.circuitBreaker();
    for (const [label, key] of INVALID_KEYS) {
      await expectReject(() => breaker.getState(key as string), 'E_INVALID_KEY', `getState(${label})`);
      await expectReject(() => breaker.recordFailure(key as string, 3), 'E_INVALID_KEY', `recordFailure(${label})`);
      await expectReject(() => breaker.recordSuccess(key as string), 'E_INVALID_KEY', `recordSuccess(${label})`);
      await expectReject(() => breaker.setState(key as string, { state: 'closed', failureCount: 0 }), 'E_INVALID_KEY', `setState(${label})`);
      await expectReject(() => breaker.delete(key as string), 'E_INVALID_KEY', `delete(${label})`);
    }
    for (const max of [0, -1, 1.5, Number.NaN, '3']) {
      await expectReject(() => breaker.recordFailure('svc', max as never), 'E_INVALID_OPTION', `maxFailures ${String(max)}`);
    }
    await expectReject(() => breaker.recordFailure('svc', 3, { cooldown: -1 }), 'E_INVALID_OPTION', 'negative cooldown');
    for (const state of [null, { state: 'broken', failureCount: 0 }, { state: 'open', failureCount: -1 }, { state: 'open', failureCount: 1, lastFailureTime: 'yesterday' }]) {
      await expectReject(() => breaker.setState('svc', state as never), 'E_INVALID_VALUE', `setState(${JSON.stringify(state)})`);
    }
    expect(await breaker.getState('svc')).toBeNull();
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    // One key per instance: this is about first use (schema creation races), not about
    // concurrent updates of one record, which the 20-failure case covers.
    const breakers = await s.many(5, (session) => session.circuitBreaker());
    expect(await parallel(5, (i) => breakers[i]!.recordFailure(`svc-${i}`, 100))).toEqual([1, 1, 1, 1, 1]);
    for (let i = 0; i < 5; i++) expect((await breakers[0]!.getState(`svc-${i}`))!.failureCount).toBe(1);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const breaker = await s.circuitBreaker();
    await Promise.all([breaker.close(), breaker.close()]);
    await breaker.close();
    const calls: [string, () => unknown][] = [
      ['getState', () => breaker.getState('svc')],
      ['setState', () => breaker.setState('svc', { state: 'closed', failureCount: 0 })],
      ['recordFailure', () => breaker.recordFailure('svc', 3)],
      ['recordSuccess', () => breaker.recordSuccess('svc')],
      ['delete', () => breaker.delete('svc')],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
  });

  it('skewed client clock: times and cooldowns come from the store clock', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const breaker = await s.circuitBreaker();
    await withClientSkew(async (skew) => {
      for (const offset of CLIENT_SKEWS) {
        skew.set(offset);
        await breaker.recordFailure(`long:${offset}`, 1, { cooldown: 30_000 });
        await breaker.recordFailure(`short:${offset}`, 1, { cooldown: SHORT_TTL });
        const state = await breaker.getState(`long:${offset}`);
        expect(Math.abs(state!.lastFailureTime! - realNow()), `lastFailureTime at ${offset} ms skew`).toBeLessThan(NEAR_NOW);
        skew.set(-offset);
        expect((await breaker.getState(`long:${offset}`))!.state, `30 s cooldown at ${offset} ms skew`).toBe('open');
        expect((await breaker.getState(`short:${offset}`))!.state).toBe('open');
      }
      await sleep(PAST_SHORT_TTL);
      for (const readAt of CLIENT_SKEWS) {
        skew.set(readAt);
        for (const offset of CLIENT_SKEWS) {
          expect((await breaker.getState(`short:${offset}`))!.state, `short cooldown read at ${readAt} ms skew`).toBe('half-open');
          expect((await breaker.getState(`long:${offset}`))!.state).toBe('open');
        }
      }
    });
  });
});
