import { getEventListeners } from 'node:events';
import { expect, test, vi } from 'vitest';
import { MemoryLockProvider } from '../src/memory/index.js';

/**
 * A long line of waiting acquisitions on one key costs each waiter the same, however long the
 * line: no waiter adds a listener to the provider's one close signal (an EventTarget scans its
 * listeners on every add and remove, which made 10,000 waiters take seconds to enqueue and
 * 100,000 minutes), and a waiter leaves the line from anywhere without a scan.
 */
test('10,000 waiters on one key add no listener each to the close signal; they leave from anywhere, in order', async () => {
  const locks = new MemoryLockProvider();
  const closeSignal = (locks as unknown as { closeSignal: AbortSignal }).closeSignal;
  const plainHolder = (await locks.acquire('plain', 60_000))!;
  const plain = Array.from({ length: 10_000 }, () => locks.acquire('plain', 60_000, { wait: 60_000 }));
  await new Promise((resolve) => setImmediate(resolve));
  expect(getEventListeners(closeSignal, 'abort').length, 'listeners on the close signal').toBeLessThanOrEqual(1);
  await plainHolder.release();
  await (await plain[0]!)!.release();
  expect(await plain[1]).not.toBeNull();

  const holder = (await locks.acquire('k', 60_000))!;
  const controllers = Array.from({ length: 10_000 }, () => new AbortController());
  const waiters = controllers.map((controller, i) =>
    locks.acquire('k', 60_000, { wait: 60_000, owner: `w${i}`, signal: controller.signal }).catch((error: { code?: string; name?: string }) => error),
  );
  await new Promise((resolve) => setImmediate(resolve));
  // Every waiter but the last two leaves (aborted): the line keeps the last two, in order.
  for (const controller of controllers.slice(0, -2)) controller.abort(new Error('gave up'));
  await holder.release();
  const next = await waiters.at(-2);
  expect(next).toMatchObject({ owner: 'w9998' });
  await locks.close();
  expect(await waiters.at(-1)).toMatchObject({ code: 'E_CLOSED' });
  expect(await waiters[0]).toMatchObject({ message: 'gave up' });
  await Promise.allSettled(plain);
});

/**
 * An acquisition that waits (`wait > 0`) for a key nobody of this provider waits for asks the
 * database at once and, granted, leaves without having made a wake-up (a promise and its
 * resolvers) for a release it never waited for. Counted, not timed.
 */
test('an uncontended acquire with wait makes no wake-up', async () => {
  const locks = new MemoryLockProvider();
  const made = vi.spyOn(Promise, 'withResolvers');
  try {
    for (let i = 0; i < 100; i++) {
      const handle = (await locks.acquire(`free:${i % 3}`, 60_000, { wait: 60_000 }))!;
      await handle.release();
    }
    expect(made).not.toHaveBeenCalled();
    // Contended, the line still works: the waiter behind the holder is granted on release.
    const holder = (await locks.acquire('busy', 60_000))!;
    const waiter = locks.acquire('busy', 60_000, { wait: 60_000 });
    await holder.release();
    expect(await waiter).not.toBeNull();
  } finally {
    made.mockRestore();
    await locks.close();
  }
});
