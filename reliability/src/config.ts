/**
 * How much load each check applies. `full` is what CI runs (the numbers of issue 8);
 * `quick` is for local iteration and proves nothing new. Every loop is bounded by a count and
 * by a time limit; running out of time before the count is reached is a failure, not a pass.
 */
export interface Budget {
  lock: {
    processes: number;
    acquisitionsPerProcess: number;
    hotKeys: number;
    ttl: number;
    /** Chance that a holder is frozen past its lease before writing. */
    pauseProbability: number;
    /** How far past the lease a frozen holder wakes up, in ms. */
    pauseOvershoot: [number, number];
    /** Share of acquisitions made through `withLock` (auto-extend) rather than `acquire`. */
    withLockShare: number;
    timeLimitMs: number;
  };
  crash: { lockTtl: number; lockKills: number; snapshotKills: number; snapshotKb: number; timeLimitMs: number };
  lostUpdates: { writers: number; increments: number; timeLimitMs: number };
  outage: {
    /** Client-side timeout configured on the stores under test, in ms. */
    timeoutMs: number;
    cutMs: number;
    /** How long work may take to resume after the proxy is restored. */
    recoveryLimitMs: number;
    loaders: number;
  };
  hostile: { largeValueBytes: number; timeLimitMs: number };
  leaks: { cycles: number; timeLimitMs: number };
}

export const FULL: Budget = {
  lock: {
    processes: 4,
    acquisitionsPerProcess: 2000,
    hotKeys: 4,
    ttl: 300,
    pauseProbability: 0.005,
    pauseOvershoot: [50, 250],
    withLockShare: 0.5,
    timeLimitMs: 150_000,
  },
  crash: { lockTtl: 2000, lockKills: 3, snapshotKills: 5, snapshotKb: 1024, timeLimitMs: 60_000 },
  lostUpdates: { writers: 8, increments: 1000, timeLimitMs: 150_000 },
  outage: { timeoutMs: 2000, cutMs: 3000, recoveryLimitMs: 15_000, loaders: 4 },
  hostile: { largeValueBytes: 16 * 1024 * 1024, timeLimitMs: 120_000 },
  leaks: { cycles: 1000, timeLimitMs: 120_000 },
};

export const QUICK: Budget = {
  lock: { ...FULL.lock, acquisitionsPerProcess: 150, pauseProbability: 0.05, timeLimitMs: 30_000 },
  crash: { lockTtl: 800, lockKills: 1, snapshotKills: 2, snapshotKb: 256, timeLimitMs: 20_000 },
  lostUpdates: { writers: 8, increments: 50, timeLimitMs: 30_000 },
  outage: { timeoutMs: 1000, cutMs: 1500, recoveryLimitMs: 10_000, loaders: 2 },
  hostile: { largeValueBytes: 1024 * 1024, timeLimitMs: 60_000 },
  leaks: { cycles: 100, timeLimitMs: 30_000 },
};

export const CHECKS = ['lock safety', 'crash recovery', 'lost updates', 'outage', 'hostile input', 'resource leaks'] as const;
export type CheckName = (typeof CHECKS)[number];
