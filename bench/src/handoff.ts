/**
 * Lock hand-off under contention: `waiters` providers (each with its own connections, as
 * separate processes would have) wait on one key; each takes the lock once per round and
 * releases it at once. A sample is the time from the holder calling `release()` to the next
 * holder's `acquire()` resolving. With wake-ups the database tells waiters about the release;
 * polling only, they find out on their next poll (default every 50 ms).
 */
import type { LockHandle, LockProvider } from '@stowage/core';
import { config } from './config.ts';
import { percentile } from './stats.ts';
import type { BackendBench } from './types.ts';

export const HANDOFF_P50_TARGET_MS = 10;

export interface HandoffResult {
  backend: string;
  mode: 'wakeups' | 'polling';
  waiters: number;
  samples: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  /** Why this mode did not run on this backend. */
  unavailable?: string;
  error?: string;
  /** Only the wake-ups mode has a target (p50 < 10 ms). */
  pass: boolean | null;
}

export async function runHandoff(backend: BackendBench, mode: 'wakeups' | 'polling'): Promise<HandoffResult> {
  const base: HandoffResult = { backend: backend.id, mode, waiters: config.handoffWaiters, samples: 0, p50Ms: null, p99Ms: null, maxMs: null, pass: null };
  const opened: { provider: LockProvider; close(): Promise<void> }[] = [];
  try {
    for (let w = 0; w <= config.handoffWaiters; w++) {
      const made = await backend.newLockProvider(mode === 'wakeups');
      if ('unavailable' in made) return { ...base, unavailable: made.unavailable };
      opened.push(made);
    }
    const [holder, ...waiters] = opened.map((o) => o.provider) as [LockProvider, ...LockProvider[]];
    const key = `handoff:${mode}:${process.pid}`;
    const ttl = 10_000;
    const samples: number[] = [];
    let releasedAt = 0;
    const release = async (handle: LockHandle): Promise<void> => {
      releasedAt = performance.now();
      await handle.release();
    };
    // one untimed round first: LISTEN connections, prepared statements, change streams
    for (let round = -1; round < config.handoffRounds; round++) {
      const first = await holder.acquire(key, ttl, { wait: 5_000 });
      if (first === null) throw new Error('the holder could not take the free lock');
      const done = waiters.map(async (provider) => {
        const handle = await provider.acquire(key, ttl, { wait: 30_000 });
        if (handle === null) throw new Error('a waiter timed out after 30 s');
        if (round >= 0) samples.push(performance.now() - releasedAt);
        await release(handle);
      });
      await new Promise((resolve) => setTimeout(resolve, 100)); // every waiter is waiting now
      await release(first);
      await Promise.all(done);
    }
    const p50 = percentile(samples, 50);
    return {
      ...base,
      samples: samples.length,
      p50Ms: p50,
      p99Ms: percentile(samples, 99),
      maxMs: Math.max(...samples),
      pass: mode === 'wakeups' ? p50 < HANDOFF_P50_TARGET_MS : null,
    };
  } catch (error) {
    return { ...base, error: (error as Error).message, pass: mode === 'wakeups' ? false : null };
  } finally {
    await Promise.all(opened.map((o) => o.close().catch(() => undefined)));
  }
}
