import type { LockProvider } from '@stowage/core';
import type { StowageSet } from './ops.ts';
import type { KeySpace } from './workload.ts';

export type ImplKind = 'stowage' | 'raw' | 'peer';

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
}

export interface PeerImpl extends Impl {
  kind: 'peer';
  /** Minimum stowage/peer throughput ratio, or `null` for a comparison without a target. */
  target: number | null;
  /** The same call on an instance whose driver traffic the backend observes (for round trips). */
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
  peers: PeerImpl[];
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
  /**
   * A lock provider with its own connections, for the hand-off run. `wakeups: false` asks
   * for polling only. Resolves `null` when that mode is not available here (with why).
   */
  newLockProvider(wakeups: boolean): Promise<{ provider: LockProvider; close(): Promise<void> } | { unavailable: string }>;
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

export interface OpResult {
  backend: string;
  op: string;
  note: string;
  /** Calls in flight during the throughput phases. */
  concurrency: number;
  expectedRoundTrips: number;
  impls: ImplResult[];
  /** stowage / raw throughput: the median of the rounds' ratios (see `pairedRatio`). */
  rawRatio: number | null;
  peerRatios: { peer: string; ratio: number | null; target: number | null }[];
  /** What stowage sent, one line per statement (captured with marker keys). */
  statements: string[];
  /** How many key parameters the raw replay substitutes (0: same key every call). */
  replayKeyParams: number | null;
  checks: TargetCheck[];
}
