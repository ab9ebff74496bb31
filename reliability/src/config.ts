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
  crash: {
    lockTtl: number;
    lockKills: number;
    snapshotKills: number;
    snapshotKb: number;
    /** SIGKILLs of a process charging keys with `runOnce`, and the keys it charges (more than 22 per kill: each run charges up to 22 before its kill). */
    runOnceKills: number;
    runOnceKeys: number;
    timeLimitMs: number;
  };
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
  shutdown: {
    /** Calls in flight when `close()` is called (one round closes at once, one after the first call settled). */
    inFlight: number;
    /** Rounds of an aborted acquisition racing the holder's release (half `acquire`, half `withLock`). */
    abortRounds: number;
  };
  /** Rounds of read version → delete (or expiry) → re-create → compare-and-set with the old version. */
  versions: { rounds: number; ttl: number };
  /** Pairs of opposite-order batches over the same keys, and keys per batch. */
  batches: { pairs: number; keys: number };
  connections: {
    /**
     * Pool `max` of every store (and of each child process): 20 processes × (2 + 1 LISTEN)
     * stay well under a 100-connection server, with room for whatever else is connected.
     */
    poolMax: number;
    /** Calls of the mixed workload in one process. */
    calls: number;
    /** Child processes at once, each with every store on one pool. */
    processes: number;
    callsPerProcess: number;
    timeLimitMs: number;
  };
  failover: {
    /** OS processes loading every store through the failover proxy. */
    processes: number;
    /** Client-side timeout of the stores (`connectionTimeoutMillis`, `query_timeout`), in ms. */
    timeoutMs: number;
    lockKeys: number;
    lockTtl: number;
    /** Lease of the process items' claims, in ms: what a claim made on the dead primary costs. */
    processLease: number;
    /** Each OS process creates a process item this often, in ms. */
    itemEveryMs: number;
    /** Successful calls of every kind of write before the primary is killed, and after the promotion. */
    warmOps: number;
    afterOps: number;
    /** Acknowledged writes of each kind made on the asynchronous primary after replication stopped. */
    asyncWrites: number;
    /** Liveness bounds: the whole load, and the process items finishing after it. */
    timeLimitMs: number;
    drainLimitMs: number;
  };
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
  crash: { lockTtl: 2000, lockKills: 3, snapshotKills: 5, snapshotKb: 1024, runOnceKills: 12, runOnceKeys: 400, timeLimitMs: 60_000 },
  lostUpdates: { writers: 8, increments: 1000, timeLimitMs: 150_000 },
  outage: { timeoutMs: 2000, cutMs: 3000, recoveryLimitMs: 15_000, loaders: 4 },
  hostile: { largeValueBytes: 16 * 1024 * 1024, timeLimitMs: 120_000 },
  leaks: { cycles: 1000, timeLimitMs: 120_000 },
  shutdown: { inFlight: 50, abortRounds: 300 },
  versions: { rounds: 200, ttl: 150 },
  batches: { pairs: 100, keys: 16 },
  connections: { poolMax: 2, calls: 400, processes: 20, callsPerProcess: 40, timeLimitMs: 120_000 },
  failover: {
    processes: 4,
    timeoutMs: 5000,
    lockKeys: 4,
    lockTtl: 2000,
    processLease: 2000,
    itemEveryMs: 50,
    warmOps: 200,
    afterOps: 200,
    asyncWrites: 40,
    timeLimitMs: 90_000,
    drainLimitMs: 60_000,
  },
};

export const QUICK: Budget = {
  lock: { ...FULL.lock, acquisitionsPerProcess: 150, pauseProbability: 0.05, timeLimitMs: 30_000 },
  crash: { lockTtl: 800, lockKills: 1, snapshotKills: 2, snapshotKb: 256, runOnceKills: 3, runOnceKeys: 120, timeLimitMs: 20_000 },
  lostUpdates: { writers: 8, increments: 50, timeLimitMs: 30_000 },
  outage: { timeoutMs: 1000, cutMs: 1500, recoveryLimitMs: 10_000, loaders: 2 },
  hostile: { largeValueBytes: 1024 * 1024, timeLimitMs: 60_000 },
  leaks: { cycles: 100, timeLimitMs: 30_000 },
  shutdown: { inFlight: 50, abortRounds: 40 },
  versions: { rounds: 30, ttl: 150 },
  batches: { pairs: 10, keys: 16 },
  connections: { poolMax: 2, calls: 100, processes: 5, callsPerProcess: 20, timeLimitMs: 60_000 },
  failover: { ...FULL.failover, processes: 2, warmOps: 20, afterOps: 20 },
};

/**
 * The budget on one backend. The checks that exist to load the database run with smaller counts
 * where each call costs far more than on the PostgreSQL server; the invariants do not need
 * more (frozen holders still happen, every increment and every abort is still counted):
 * - jongodb serves lock acquisitions at ~190/s on a quiet machine and under 45/s while CI loads
 *   both cores (8,000 of them missed the time limit): a quarter of them, with twice the time,
 *   and half the increments;
 * - PGlite is one database session behind a multiplexer: half the acquisitions and increments;
 * - FerretDB (`mongo` in CI) takes ~170 ms per abort round and ~55 ms per leak cycle: a third of the
 *   abort rounds, half the leak cycles;
 * - PgBouncer runs the same adapter on the same server as `postgres`, one hop further: half
 *   the acquisitions, increments and leak cycles.
 */
export function budgetFor(backend: string, budget: Budget): Budget {
  const half = (count: number) => Math.ceil(count / 2);
  const { lock, lostUpdates, leaks, shutdown } = budget;
  switch (backend) {
    case 'jongodb':
      return {
        ...budget,
        lock: { ...lock, acquisitionsPerProcess: Math.ceil(lock.acquisitionsPerProcess / 4), timeLimitMs: 2 * lock.timeLimitMs },
        lostUpdates: { ...lostUpdates, increments: half(lostUpdates.increments) },
      };
    case 'pglite':
      return { ...budget, lock: { ...lock, acquisitionsPerProcess: half(lock.acquisitionsPerProcess) }, lostUpdates: { ...lostUpdates, increments: half(lostUpdates.increments) } };
    case 'mongo':
      return { ...budget, leaks: { ...leaks, cycles: half(leaks.cycles) }, shutdown: { ...shutdown, abortRounds: Math.ceil(shutdown.abortRounds / 3) } };
    case 'pgbouncer':
      return {
        ...budget,
        lock: { ...lock, acquisitionsPerProcess: half(lock.acquisitionsPerProcess) },
        lostUpdates: { ...lostUpdates, increments: half(lostUpdates.increments) },
        leaks: { ...leaks, cycles: half(leaks.cycles) },
      };
    default:
      return budget;
  }
}

export const CHECKS = [
  'lock safety',
  'crash recovery',
  'lost updates',
  'outage',
  'hostile input',
  'resource leaks',
  'errors',
  'least privilege',
  'shutdown',
  'versions',
  'namespaces',
  'batches',
  'connections',
  'failover',
] as const;
export type CheckName = (typeof CHECKS)[number];
