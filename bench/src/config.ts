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
  maxRounds: intFromEnv('BENCH_MAX_ROUNDS', 15, 1),
  /** Connections per pool / MongoClient (the same for stowage, the raw driver and peers). */
  poolSize: intFromEnv('BENCH_POOL_SIZE', 10, 10),
  /** Operations of the heap-growth run, per backend. */
  memoryOps: intFromEnv('BENCH_MEMORY_OPS', 100_000, 20_000),
  /** The heap-growth run stops early (with fewer ops, reported) past this many ms: slow servers. */
  memoryMaxMs: intFromEnv('BENCH_MEMORY_MAX_MS', 40_000, 15_000),
  /** Heap samples taken during the heap-growth run (after forced GC). */
  memorySamples: intFromEnv('BENCH_MEMORY_SAMPLES', 11, 6),
  /** Hand-off rounds: each round, 8 waiters take the lock one after the other. */
  handoffRounds: intFromEnv('BENCH_HANDOFF_ROUNDS', 8, 3),
  handoffWaiters: intFromEnv('BENCH_HANDOFF_WAITERS', 8, 8),
  /** Which backends run: pglite, postgres, mongo (default: every one found). */
  backends: listFromEnv('BENCH_BACKENDS'),
  /** Only operations whose name contains one of these (e.g. `kv.,cache.`). */
  ops: listFromEnv('BENCH_OPS'),
  /** Skip the hand-off and memory sections (`BENCH_SKIP=handoff,memory`). */
  skip: new Set(listFromEnv('BENCH_SKIP') ?? []),
  outDir: process.env.BENCH_OUT_DIR ?? 'bench-results',
  /** Log every phase of every operation (where a slow server spends the time). */
  verbose: /^(1|true)$/i.test(process.env.BENCH_VERBOSE ?? ''),
};

export type BenchConfig = typeof config;

export function opSelected(name: string): boolean {
  return config.ops === null || config.ops.some((part) => name.includes(part));
}
