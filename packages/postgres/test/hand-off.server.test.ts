import { expect, test } from 'vitest';
import { PostgresLockProvider } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { serverTestSetup } from './support/server.js';

/**
 * Many acquisitions of one provider waiting for one key: only the first in line asks the
 * database, and a release through the provider hands the lock to it at once. Counted in
 * statements, not time: polls are 60 s apart and wake-ups are off, so every statement here is
 * an attempt the hand-off itself made.
 */
const { admin, describeServer, freshTables } = await serverTestSetup({ max: 2 });

describeServer('lock hand-off among the waiters of one provider', () => {
  const tables = freshTables();

  test('64 waiters: each acquisition is one attempt and one release', { timeout: 60_000 }, async () => {
    const pool = new CountingPool(admin);
    const locks = new PostgresLockProvider({ pool, table: tables.locks, wakeups: false, cleanupInterval: false });
    const holder = (await locks.acquire('hot', 60_000))!;
    pool.reset();
    const waiters = Array.from({ length: 64 }, async () => {
      const handle = await locks.acquire('hot', 60_000, { wait: 30_000, pollInterval: 60_000 });
      expect(handle, 'granted in turn, long before a poll').not.toBeNull();
      await handle!.release();
      return handle!.fence;
    });
    await holder.release();
    const fences = await Promise.all(waiters);
    const attempts = pool.statements.filter((text) => text.includes('INSERT INTO')).length;
    // The first waiter's attempt while the holder held it, then one granted attempt each.
    expect({ attempts, releases: pool.statements.length - attempts }).toEqual({ attempts: 65, releases: 65 });
    expect(new Set(fences).size).toBe(64);
    await locks.close();
  });
});
