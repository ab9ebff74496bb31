/**
 * KeyValueStore cases: batches in opposite key order, close() settling calls in flight, instances
 * sharing a namespace, concurrent first use, close, a skewed client clock.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import {
  CLIENT_SKEWS,
  PAST_SHORT_TTL,
  SHORT_TTL,
  errorCode,
  expectReject,
  parallel,
  sleep,
  withClientSkew,
} from '../../helpers.js';

export const lifecycleCases = defineCases('KeyValueStore', (it) => {
  // All or nothing under concurrency needs multi-document transactions (a MongoDB standalone or FerretDB has none).
  it('batches over the same keys in opposite order never deadlock', { needs: ['transactions'] }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.kv());
    const keys = Array.from({ length: 20 }, (_, i) => `batch:${String(i).padStart(2, '0')}`);
    for (let round = 0; round < 10; round++) {
      const forward = keys.map((key) => ({ key, value: `a${round}` }));
      const backward = [...keys].reverse().map((key) => ({ key, value: `b${round}` }));
      await Promise.all([a!.setMany(forward), b!.setMany(backward), a!.deleteMany(keys.slice(5)), b!.deleteMany([...keys].reverse().slice(5))]);
    }
    // Each batch is all or nothing: the first five keys hold one batch's value, all alike.
    const values = await a!.getMany(keys.slice(0, 5));
    expect(new Set(values).size, `values: ${values}`).toBe(1);
  });

  it('close() settles every call in flight before it resolves; nothing acknowledged is lost', async (s) => {
    const kv = await s.kv();
    await kv.get('warm-up');
    const writes = Array.from({ length: 50 }, (_, i) => kv.set(`inflight:${String(i).padStart(2, '0')}`, String(i)));
    const outcomes: PromiseSettledResult<void>[] = [];
    const settledAll = Promise.allSettled(writes).then((results) => outcomes.push(...results));
    await kv.close();
    // Every call settled by the time close() resolved: none still pending, none left hanging.
    await Promise.race([settledAll, sleep(0).then(() => expect.fail('calls still pending after close() resolved'))]);
    for (const outcome of outcomes) {
      if (outcome.status === 'rejected') expect(errorCode(outcome.reason)).toBe('E_CLOSED');
    }
    const other = await s.kv();
    const acknowledged = outcomes.map((outcome, i) => (outcome.status === 'fulfilled' ? `inflight:${String(i).padStart(2, '0')}` : null)).filter((key) => key !== null);
    const stored = await other.keys('inflight:*');
    for (const key of acknowledged) expect(stored, `acknowledged write ${key}`).toContain(key);
  });

  it('instances from one context share data; closing one leaves the others working', async (s) => {
    const [a, b] = await s.many(2, (session) => session.kv());
    await a!.set('shared', 'from a');
    expect(await b!.get('shared')).toBe('from a');
    await a!.close();
    await b!.set('shared', 'from b');
    expect(await b!.get('shared')).toBe('from b');
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const stores = await s.many(5, (session) => session.kv());
    await parallel(stores.length, async (i) => {
      await stores[i]!.set(`first:${i}`, String(i));
      await stores[i]!.get(`first:${(i + 1) % stores.length}`);
    });
    expect(await stores[0]!.keys('first:*')).toEqual(stores.map((_, i) => `first:${i}`));
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    await Promise.all([kv.close(), kv.close()]);
    await kv.close();
    const calls: [string, () => unknown][] = [
      ['get', () => kv.get('a')],
      ['set', () => kv.set('a', '2')],
      ['delete', () => kv.delete('a')],
      ['exists', () => kv.exists('a')],
      ['keys', () => kv.keys()],
      ['getMany', () => kv.getMany(['a'])],
      ['setMany', () => kv.setMany([{ key: 'a', value: '2' }])],
      ['deleteMany', () => kv.deleteMany(['a'])],
      ['getEntry', () => kv.getEntry('a')],
      ['entries', () => kv.entries()],
      ['compareAndSet', () => kv.compareAndSet('a', '2', 1)],
      ['clearExpired', () => kv.clearExpired()],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
    const other = await s.kv();
    expect(await other.get('a')).toBe('1');
  });

  it('skewed client clock: expiry follows the store clock, not Date', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const kv = await s.kv();
    await withClientSkew(async (skew) => {
      for (const offset of CLIENT_SKEWS) {
        // Written while the client clock is off one way, read while it is off the other way.
        skew.set(offset);
        await kv.set(`live:${offset}`, 'v', { ttl: 30_000 });
        await kv.set(`short:${offset}`, 'v', { ttl: SHORT_TTL });
        skew.set(-offset);
        expect(await kv.get(`live:${offset}`), `30 s key written at ${offset} ms skew`).toBe('v');
        expect(await kv.exists(`live:${offset}`)).toBe(true);
        expect(await kv.get(`short:${offset}`), `${SHORT_TTL} ms key just written at ${offset} ms skew`).toBe('v');
      }
      await sleep(PAST_SHORT_TTL);
      for (const readAt of CLIENT_SKEWS) {
        skew.set(readAt);
        for (const offset of CLIENT_SKEWS) {
          const what = `${SHORT_TTL} ms key written at ${offset} ms skew, read after expiry at ${readAt} ms skew`;
          expect(await kv.get(`short:${offset}`), what).toBeNull();
          expect(await kv.get(`live:${offset}`)).toBe('v');
        }
      }
      skew.set(-CLIENT_SKEWS[0]);
      expect(await kv.keys('short:*')).toEqual([]);
      const version = await kv.compareAndSet('cas', 'v', null, { ttl: 30_000 });
      skew.set(CLIENT_SKEWS[0]);
      expect(await kv.getEntry('cas')).toMatchObject({ value: 'v', version });
    });
  });
});
