/**
 * A source of time in epoch milliseconds. Database adapters never use one for expiry: they
 * ask the server. The in-memory adapter takes one so tests can move time.
 */
export interface Clock {
  now(): number;
}

/**
 * The process's monotonic clock, anchored to the wall clock once at start-up. Changing or
 * mocking `Date` does not move it, which is what a store's "own clock" must do.
 */
export const monotonicClock: Clock = {
  now: () => Math.floor(performance.timeOrigin + performance.now()),
};

/** A clock the caller moves by hand: `advance(ms)` or `set(epochMs)`. */
export class ManualClock implements Clock {
  constructor(private current = 0) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
  set(epochMs: number): void {
    this.current = epochMs;
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
