/**
 * Timing primitives. Throughput: a fixed number of calls with `concurrency` in flight, timed
 * as a whole; latency is timed call by call in run-op.ts. The implementations of one
 * operation take turns in short slices and ratios are taken round by round (see `runOp`), so
 * that a noisy moment on a 2-core machine hurts every implementation alike instead of one.
 */
import type { ThroughputSample } from './types.ts';

export type { ThroughputSample };

export interface Runnable {
  run(i: number): Promise<unknown>;
}

export async function timeConcurrent(impl: Runnable, count: number, concurrency: number): Promise<ThroughputSample> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      await impl.run(i);
    }
  };
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  const elapsedMs = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { ops: count, elapsedMs, opsPerSec: (count / elapsedMs) * 1000, cpuMicrosPerOp: (used.user + used.system) / count };
}

/**
 * Calls `run` sequentially without timing (JIT, connections, prepared statements), within
 * `budgetMs` after 5 calls. Returns the mean wall time of a call in ms.
 */
export async function warmUp(impl: Runnable, iterations: number, budgetMs = Infinity): Promise<number> {
  const begin = performance.now();
  let calls = 0;
  while (calls < iterations) {
    await impl.run(calls++);
    if (calls > 5 && performance.now() - begin > budgetMs) break;
  }
  return (performance.now() - begin) / Math.max(1, calls);
}
