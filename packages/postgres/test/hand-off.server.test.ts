import pg from 'pg';
import { expect, test, vi } from 'vitest';
import { PostgresLockProvider } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { serverTestSetup } from './support/server.js';

/**
 * Many acquisitions of one provider waiting for one key: only the first in line asks the
 * database, and a release through the provider hands the lock to it at once. Counted in
 * statements, not time: polls are 60 s apart and wake-ups are off, so every statement here is
 * an attempt the hand-off itself made.
 */
const { admin, url, describeServer, freshTables } = await serverTestSetup({ max: 2 });

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
    // The first waiter's attempt has been answered (refused) before the holder lets go.
    await vi.waitFor(() => expect(pool.answered).toBe(1), { timeout: 10_000 });
    await holder.release();
    const fences = await Promise.all(waiters);
    const attempts = pool.statements.filter((text) => text.includes('INSERT INTO')).length;
    // The first waiter's attempt while the holder held it, then one granted attempt each.
    expect({ attempts, releases: pool.statements.length - attempts }).toEqual({ attempts: 65, releases: 65 });
    expect(new Set(fences).size).toBe(64);
    await locks.close();
  });

  /**
   * Four providers, each on a pool and LISTEN connection of its own (as four processes would
   * be), 16 waiters each. A release that every process heard woke each one's first waiter:
   * one won, three tried in vain. Now a provider hands the key to the waiters of its own that
   * already waited as it won the key, without an announcement, so each acquisition is one
   * granted attempt and one release plus a few tries when a provider's batch ends. Polls are
   * 60 s apart: every statement counted is the hand-off's.
   */
  test('64 waiters over 4 providers with wake-ups: at most 3 statements per acquisition', { timeout: 60_000 }, async () => {
    const pools = Array.from({ length: 4 }, () => new CountingPool(new pg.Pool({ connectionString: url, max: 2, application_name: 'stowage-test-handoff' })));
    const providers = pools.map((pool) => new PostgresLockProvider({ pool, table: tables.locks, cleanupInterval: false }));
    try {
      for (const locks of providers) await locks.ready();
      expect(providers.every((locks) => locks.capabilities.wakeups), 'LISTEN works on this server').toBe(true);
      const holder = (await providers[0]!.acquire('hot4', 60_000))!;
      for (const pool of pools) pool.reset();
      const waiters = providers.flatMap((locks) =>
        Array.from({ length: 16 }, async () => {
          const handle = await locks.acquire('hot4', 60_000, { wait: 30_000, pollInterval: 60_000 });
          expect(handle, 'granted long before a poll').not.toBeNull();
          await handle!.release();
          return handle!.fence;
        }),
      );
      // Every provider's first waiter has tried once and waits: the holder lets go.
      await vi.waitFor(() => expect(pools.map((pool) => pool.answered)).toEqual([1, 1, 1, 1]), { timeout: 10_000 });
      await holder.release();
      const fences = await Promise.all(waiters);
      expect(new Set(fences).size).toBe(64);
      // The holder's release belongs to an acquisition not counted here.
      const statements = pools.reduce((sum, pool) => sum + pool.count, 0) - 1;
      expect(statements / 64).toBeLessThanOrEqual(3);
    } finally {
      for (const locks of providers) await locks.close();
      for (const pool of pools) await pool.end();
    }
  });

  /**
   * The hand-off without an announcement is for the waiters that were in line when the provider
   * won the key (its batch): one that came later waits for a release every process hears, so a
   * busy provider cannot keep the key from the others' waiters.
   */
  test('a waiter that came after its provider won the key is handed it only by an announced release', { timeout: 60_000 }, async () => {
    const pool = new CountingPool(new pg.Pool({ connectionString: url, max: 2, application_name: 'stowage-test-handoff' }));
    const locks = new PostgresLockProvider({ pool, table: tables.locks, cleanupInterval: false });
    try {
      await locks.ready();
      expect(locks.capabilities.wakeups, 'LISTEN works on this server').toBe(true);
      const waiting = { wait: 30_000, pollInterval: 60_000 };
      // In line before the first is granted: handed on, unannounced.
      const first = locks.acquire('batch', 60_000, waiting);
      const second = locks.acquire('batch', 60_000, waiting);
      const winner = (await first)!;
      // Came after the provider won the key: not in its batch.
      const late = locks.acquire('batch', 60_000, waiting);
      pool.reset();
      await winner.release();
      const handed = (await second)!;
      await handed.release();
      expect(await late, 'granted on the announced release').not.toBeNull();
      const releases = pool.statements.filter((text) => text.includes("'-infinity'"));
      expect(releases.map((text) => text.includes('pg_notify'))).toEqual([false, true]);
    } finally {
      await locks.close();
      await pool.end();
    }
  });
});
