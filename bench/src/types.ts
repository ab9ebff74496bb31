import type { StowageSet } from './ops.ts';
import type { KeySpace } from './workload.ts';

/**
 * - `stowage`: the measured adapter, as users get it (coalescing on);
 * - `variant`: the same adapter with an option changed (`coalesce: false`);
 * - `raw`: the raw driver sending the obvious single statement per call, the way code written
 *   without stowage would (`pool.query(text, values)`, `collection.findOne(…)`);
 * - `anchor`: the physical floor of the server on the same table (`pgbench -S -M prepared`,
 *   the driver's `find` by `_id`);
 * - `replay`: the raw driver replaying the very statements stowage sent (what stowage adds on
 *   the client; see replay.ts);
 * - `peer`: another library doing the same job (`@keyv/postgres`, …).
 */
export type ImplKind = 'stowage' | 'variant' | 'raw' | 'anchor' | 'replay' | 'peer';

export interface Impl {
  /** `stowage`, `raw pg`, `@keyv/postgres`, … */
  name: string;
  kind: ImplKind;
  run(i: number): Promise<unknown>;
  /** Before every timed phase of `count` calls (after the key space moved on): data this implementation needs. */
  prepare?: (count: number) => Promise<void>;
  /** Once, before anything: the keys reads need. */
  seed?: () => Promise<void>;
  /** Raw replays: how many parameters carry the key (0: the same key every call). */
  keyParams?: number;
  /** Minimum stowage/this throughput ratio, or `null` for a comparison without a target. */
  target?: number | null;
  /**
   * An implementation that is a program of its own (pgbench): it runs `count` calls with
   * `concurrency` in flight and reports its own rate, instead of `run` being called.
   */
  batch?: (count: number, concurrency: number) => Promise<ThroughputSample>;
  /** The sequential counterpart of `batch`: the latency of `count` calls one at a time, in ms. */
  sequential?: (count: number) => Promise<number[]>;
  /** The same call on an instance whose driver traffic the backend observes (for round trips). */
  observed?: (i: number) => Promise<unknown>;
  /** Round trips per call when they cannot be observed (an external program). */
  knownRoundTrips?: number;
}

export interface ThroughputSample {
  ops: number;
  elapsedMs: number;
  opsPerSec: number;
  /**
   * CPU time this process spent per call (user + system, µs); NaN for an external program.
   * The database's work is the same for stowage and the replay, so the difference is roughly
   * what stowage adds on the client.
   */
  cpuMicrosPerOp: number;
}

/** Another library doing the same job: always observed (round trips), always with a target or `null`. */
export interface PeerImpl extends Impl {
  kind: 'peer';
  target: number | null;
  observed: (i: number) => Promise<unknown>;
}

/** What the driver sent during an observed call. */
export interface Observation {
  count: number;
  /** One line per statement/command, for the report. */
  descriptions: string[];
  /** Backend-specific capture the raw replayer understands. */
  capture: unknown;
}

export interface OpBench {
  /** `kv.get`, `snapshot.save`, … */
  name: string;
  /** Round trips one call must take (1 for a single operation or a batch; 2 for acquire+release). */
  expectedRoundTrips: number;
  /** What one call does, for the report. */
  note: string;
  /** Calls in flight in throughput phases, when the server cannot take `config.concurrency`. */
  concurrency?: number;
  keys: KeySpace;
  /** stowage's implementation; its `seed`/`prepare` also serve the raw replay (same tables). */
  stowage: Impl;
  /** The same stowage call on the instance whose driver traffic is observed. */
  observed: (i: number) => Promise<unknown>;
  /**
   * The captured call is the second one on its keys (the first is made, unobserved, just
   * before): what the measured calls are once they have gone round their key space, where a
   * first call differs (the classic Mongo dialect reads a lock's fence before its first grant).
   */
  captureSecondCall?: boolean;
  /** Everything stowage is compared with besides the replay: variants, raw statements, anchors, peers. */
  others: Impl[];
  /** Target of stowage/replay throughput, or `null`: the replay is then a row without a target. */
  replayTarget: number | null;
  /** A lone sequential call's p50 must be within this factor of the `raw` row's p50. */
  latencyTarget?: number;
  /**
   * Objects the caller hands stowage (a snapshot, a cache value). Where stowage sent one to
   * `pg` as its JSON text, the raw replay passes the object itself and lets the driver
   * serialize it, as code using the driver directly would: turning the object into JSON is
   * part of the operation's floor. (The Mongo replay always sends objects; the driver encodes
   * them as BSON.)
   */
  callerValues?: readonly unknown[];
  /**
   * The call hands the caller back an object that stowage keeps as JSON in this column or
   * field (the cache's `value`, a snapshot's `snapshot`): the raw replay parses the JSON text
   * it read, as code using the driver directly would. The other half of `callerValues`: a
   * value's way into the database and its way back out.
   */
  returnsCallerValue?: 'value' | 'snapshot';
}

/** One row of a section table: its cells, and the target it checks (its verdict), if any. */
export interface SectionRow {
  cells: string[];
  check?: TargetCheck;
  /** Shown in the verdict column of a row without a target (why there is none, or n/a). */
  note?: string;
  /** The measurements behind the row, for results.json. */
  data?: Record<string, unknown>;
}

/** A table of the sections beyond the operations: listings by table size, hand-off, connections, memory. */
export interface SectionTable {
  /** `flat`, `generic-plan`, `handoff`, `connections`, `memory`, `clear-expired`, `heap` */
  id: string;
  title: string;
  /** The columns before the verdict column. */
  header: string[];
  align: ('l' | 'r')[];
  rows: SectionRow[];
  notes: string[];
  /** The section could not run (the rows may be empty). */
  error?: string;
}

/** A part of a backend's run besides the operations; `id` is what `BENCH_SKIP` names. */
export interface Section {
  id: 'flat' | 'handoff' | 'connections' | 'memory' | 'open-loop';
  run(log: (line: string) => void): Promise<SectionTable[]>;
}

/** A backend the bench runs on: its operations and how to watch its driver. */
export interface BackendBench {
  id: 'pglite' | 'postgres' | 'mongo';
  title: string;
  label: string;
  driver: string;
  ops: OpBench[];
  /** stowage's adapter on this backend, or `null` with the reason in `stowageError`. */
  stowage: StowageSet | null;
  stowageError: string | null;
  /** How peers were run on this backend, when that needs explaining. */
  notes: string[];
  /** Everything else this backend measures, in order (after the operations). */
  sections: Section[];
  /**
   * Empties the bench's tables/collections so that every operation starts
   * from the same small store: results do not depend on the order operations ran in, and
   * servers that scan (FerretDB) stay fast enough to measure.
   */
  resetData(): Promise<void>;
  observe(fn: () => Promise<unknown>): Promise<Observation>;
  /** The raw-driver implementation that replays a captured stowage call. */
  rawFor(op: OpBench, capture: Observation): Impl;
  close(): Promise<void>;
}

export interface LatencySummary {
  p50: number;
  p99: number;
  mean: number;
  samples: number;
}

export interface ImplResult {
  name: string;
  kind: ImplKind;
  latency: LatencySummary | null;
  /** Median round's throughput, ops/s with `concurrency` in flight. */
  opsPerSec: number | null;
  roundsOpsPerSec: number[];
  /** Client CPU per call during the throughput phases (median over rounds, µs). */
  cpuMicrosPerOp: number | null;
  roundsCpuMicrosPerOp: number[];
  roundTrips: number | null;
  roundTripDetail: string[];
  error?: string;
}

export interface TargetCheck {
  what: string;
  target: string;
  actual: string;
  pass: boolean;
}

export interface RatioResult {
  impl: string;
  kind: ImplKind;
  /** stowage's throughput over this row's: the median of the rounds' ratios (see `pairedRatio`). */
  ratio: number | null;
  target: number | null;
}

export interface OpResult {
  backend: string;
  op: string;
  note: string;
  /** Calls in flight during the throughput phases. */
  concurrency: number;
  expectedRoundTrips: number;
  impls: ImplResult[];
  ratios: RatioResult[];
  /** stowage's sequential p50 over the `raw` row's, where the operation has a latency target. */
  latencyRatio: number | null;
  latencyTarget: number | null;
  /** What stowage sent, one line per statement (captured with marker keys). */
  statements: string[];
  /** How many key parameters the raw replay substitutes (0: same key every call). */
  replayKeyParams: number | null;
  checks: TargetCheck[];
}
