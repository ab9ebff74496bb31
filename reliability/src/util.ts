import { isStowageError, type StowageErrorCode } from '@stowage/core';

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Stops the whole process for `ms`, timers included: what a long GC pause or a frozen VM does. */
export function freezeProcess(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export function randomInt(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min + 1));
}

export function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

export function errorCode(error: unknown): StowageErrorCode | null {
  return isStowageError(error) ? error.code : null;
}

/** Runs `fn`, resolving to its outcome, or `'hung'` when it has not settled after `ms`. */
export async function settleWithin<T>(
  ms: number,
  fn: () => Promise<T>,
): Promise<{ status: 'fulfilled'; value: T } | { status: 'rejected'; reason: unknown } | { status: 'hung' }> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<{ status: 'hung' }>((resolve) => (timer = setTimeout(() => resolve({ status: 'hung' }), ms)));
  try {
    return await Promise.race([
      fn().then(
        (value) => ({ status: 'fulfilled' as const, value }),
        (reason: unknown) => ({ status: 'rejected' as const, reason }),
      ),
      hung,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export function formatMs(ms: number): string {
  return ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
