/**
 * Every knob of the bench, read from the environment once. `BENCH_QUICK=1` is a fast pass
 * (about a quarter of the default work) for checking that the harness runs; the numbers it
 * prints are noisier.
 */
const quick = /^(1|true)$/i.test(process.env.BENCH_QUICK ?? '');

function intFromEnv(name: string, full: number, fast: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return quick ? fast : full;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return value;
}

function intListFromEnv(name: string, full: number[], fast: number[]): number[] {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return quick ? fast : full;
  const values = raw.split(',').map((part) => Number(part.trim()));
  if (values.some((value) => !Number.isInteger(value) || value <= 0)) throw new Error(`${name} must be a comma list of positive integers, got ${raw}`);
  return values;
}

function listFromEnv(name: string): string[] | null {
  const raw = process.env[name];
  if (!raw) return null;
  return raw.split(',').map((part) => part.trim()).filter(Boolean);
}

export const config = {
  quick,
  /** Sequential calls timed one by one per implementation and round. */
  latencyIterations: intFromEnv('BENCH_LATENCY_ITERATIONS', 300, 80),
  /** Untimed calls before anything is measured (JIT, prepared statements, connections). */
  warmupIterations: intFromEnv('BENCH_WARMUP_ITERATIONS', 100, 30),
  /** Target wall time of one concurrent throughput phase, in ms (the op count is derived from it). */
  throughputMs: intFromEnv('BENCH_THROUGHPUT_MS', 500, 150),
  /** Calls in flight during throughput phases. */
  concurrency: intFromEnv('BENCH_CONCURRENCY', 32, 32),
  /** Wall-time budget per operation (ms): later rounds are skipped once it is spent (slow servers). */
  opBudgetMs: intFromEnv('BENCH_OP_BUDGET_MS', 20_000, 5_000),
  /** Rounds per operation; implementations take turns in slices within a round, the median round ratio counts. */
  rounds: intFromEnv('BENCH_ROUNDS', 5, 1),
  /** More rounds, up to this many, while a ratio's median is still imprecise (noisy servers). */
  maxRounds: intFromEnv('BENCH_MAX_ROUNDS', 9, 1),
  /** Rows of the table the point reads and writes use (keys 1…n, uniformly at random, as `pgbench -S`). */
  anchorRows: intFromEnv('BENCH_ANCHOR_ROWS', 100_000, 100_000),
  /** Table sizes of the listings (the first is the small one, the last the big one). */
  flatRows: intListFromEnv('BENCH_FLAT_ROWS', [10_000, 1_000_000], [10_000, 1_000_000]),
  /** Sequential calls timed per listing and table size (after warm-up calls that reach the generic plan). */
  flatCalls: intFromEnv('BENCH_FLAT_CALLS', 30, 12),
  /** Whole-table patterns sent on the same connection before the prefix pattern is timed again. */
  flatWholeTablePatterns: intFromEnv('BENCH_FLAT_WHOLE_TABLE_PATTERNS', 20, 20),
  /** Connections per pool / MongoClient (the same for stowage, the raw driver and peers). */
  poolSize: intFromEnv('BENCH_POOL_SIZE', 10, 10),
  /** Operations of the heap-growth run, per backend. */
  memoryOps: intFromEnv('BENCH_MEMORY_OPS', 60_000, 20_000),
  /** The heap-growth run stops early (with fewer ops, reported) past this many ms: slow servers. */
  memoryMaxMs: intFromEnv('BENCH_MEMORY_MAX_MS', 20_000, 10_000),
  /** Heap samples taken during the heap-growth run (after forced GC). */
  memorySamples: intFromEnv('BENCH_MEMORY_SAMPLES', 11, 6),
  /** Waiters on one key, one hand-off run per count; each waiter is one `acquire` with `wait`. */
  handoffWaiters: intListFromEnv('BENCH_HANDOFF_WAITERS', [8, 64, 256], [8, 64, 256]),
  /** At least this many hand-offs are timed per waiter count (rounds of every waiter taking the lock once). */
  handoffSamples: intFromEnv('BENCH_HANDOFF_SAMPLES', 128, 64),
  /** Child processes of the connections run, each with every store from one URL. */
  connectionProcesses: intFromEnv('BENCH_CONNECTION_PROCESSES', 20, 20),
  /** How long each of those processes runs its mixed workload (ms). */
  connectionWorkloadMs: intFromEnv('BENCH_CONNECTION_WORKLOAD_MS', 3_000, 2_000),
  /** How long the open-loop load generator offers each rate (ms). */
  openLoopMs: intFromEnv('BENCH_OPEN_LOOP_MS', 3_000, 1_000),
  /** Rounds of the open-loop ladder (implementations interleaved within each; medians across). */
  openLoopRounds: intFromEnv('BENCH_OPEN_LOOP_ROUNDS', 3, 1),
  /** Which backends run: pglite, postgres, mongo (default: every one found). */
  backends: listFromEnv('BENCH_BACKENDS'),
  /** Only operations whose name contains one of these (e.g. `kv.,cache.`). */
  ops: listFromEnv('BENCH_OPS'),
  /** Skip sections: `ops`, `flat`, `handoff`, `connections`, `memory`, `open-loop` (`BENCH_SKIP=handoff,memory`). */
  skip: new Set(listFromEnv('BENCH_SKIP') ?? []),
  outDir: process.env.BENCH_OUT_DIR ?? 'bench-results',
  /** Log every phase of every operation (where a slow server spends the time). */
  verbose: /^(1|true)$/i.test(process.env.BENCH_VERBOSE ?? ''),
};

export type BenchConfig = typeof config;

export function opSelected(name: string): boolean {
  return config.ops === null || config.ops.some((part) => name.includes(part));
}
