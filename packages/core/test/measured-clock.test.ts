import { describe, expect, it } from 'vitest';
import { MeasuredClock } from '../src/adapter/index.js';
import { ManualClock, hasCapability } from '../src/index.js';

describe('MeasuredClock', () => {
  it('estimates the server clock as local time plus the offset at the middle of the round trip', async () => {
    const local = new ManualClock(1_000);
    const clock = new MeasuredClock(
      async () => {
        local.advance(10); // the request travels 10 ms, the server reads its clock, the reply takes 10 ms
        const serverTime = 500_000;
        local.advance(10);
        return serverTime;
      },
      { local },
    );
    expect(() => clock.now()).toThrow();
    const sample = await clock.measure();
    expect(sample).toEqual({ offset: 500_000 - 1_010, roundTrip: 20, measuredAt: 1_020 });
    expect(clock.now()).toBe(500_010);
    local.advance(5_000);
    expect(clock.now()).toBe(505_010);
  });

  it('takes a new sample in the background once the last one is stale, without waiting for it', async () => {
    const local = new ManualClock(0);
    let serverTime = 1_000_000;
    let reads = 0;
    const clock = new MeasuredClock(
      async () => {
        reads++;
        return serverTime;
      },
      { local, refreshEvery: 1_000 },
    );
    await clock.measure();
    serverTime += 60_000; // the server's clock jumped (NTP step)
    local.advance(999);
    expect(clock.now()).toBe(1_000_999);
    expect(reads).toBe(1);
    local.advance(2);
    expect(clock.now()).toBe(1_001_001); // answered from the old sample, refresh started
    await Promise.resolve();
    await Promise.resolve();
    expect(reads).toBe(2);
    expect(clock.now()).toBe(1_060_000);
  });

  it('keeps a recent fast sample over a slow one', () => {
    const clock = new MeasuredClock(async () => 0, { local: new ManualClock(0), refreshEvery: 60_000 });
    clock.record(10_000, 0, 2); // offset 9 999, round trip 2
    clock.record(20_000, 1_000, 1_400); // round trip 400: less precise, ignored
    expect(clock.sample).toMatchObject({ offset: 9_999, roundTrip: 2 });
    clock.record(20_000, 200_000, 200_300); // the fast sample is old now: take the slow one
    expect(clock.sample).toMatchObject({ offset: 20_000 - 200_150, roundTrip: 300 });
  });
});

describe('hasCapability', () => {
  it('reads booleans, and counts an absent optional capability as granted', () => {
    const base = { serverClock: true, fencing: false, ttlIndex: false, changeFeed: false, wakeups: false, transactions: false, crossProcess: true };
    expect(hasCapability(base, 'serverClock')).toBe(true);
    expect(hasCapability(base, 'fencing')).toBe(false);
    expect(hasCapability(base, 'atomicUpdates')).toBe(true);
    expect(hasCapability({ ...base, atomicUpdates: false }, 'atomicUpdates')).toBe(false);
    expect(hasCapability(undefined, 'serverClock')).toBe(false);
  });
});
