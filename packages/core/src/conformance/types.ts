import type { CacheOptions, CacheProvider } from '../contracts/cache.js';
import type { CheckpointStore } from '../contracts/checkpoints.js';
import type { CircuitBreakerStore } from '../contracts/circuit-breaker.js';
import type { IdempotencyStore } from '../contracts/idempotency.js';
import type { KeyValueStore } from '../contracts/kv.js';
import type { LockProvider } from '../contracts/locks.js';
import type { ProcessBackend } from '../contracts/process.js';
import type { SnapshotStore, WorkflowLock } from '../contracts/snapshots.js';
import type { Codec, JsonObject } from '../json.js';

/**
 * What an adapter author hands the conformance suite. The suite owns lifecycle: before each
 * test it calls `createContext()`, opens instances through the context's factories, closes
 * every instance it opened after the test, then calls the context's `cleanup`.
 */
export interface ConformanceAdapter {
  /** Shown in test names, e.g. "postgres (PGlite)". */
  name: string;
  /** A fresh, isolated namespace (unique table/collection names or key prefix) for one test. */
  createContext(): Promise<ConformanceContext> | ConformanceContext;
}

/**
 * Factories bound to one namespace. Instances opened from the same context share storage, the
 * way two processes pointed at the same database do: the suite uses that to test contention,
 * and "close one, use another". Omit a factory when the adapter does not implement a contract;
 * its cases are then reported as skipped.
 */
export interface ConformanceContext {
  kv?(): Promise<KeyValueStore>;
  /**
   * With `lock: true` the store must also implement awaitly's `WorkflowLock`. Stores with
   * different `prefix`es from one context share storage (for namespace isolation).
   */
  snapshots?(options: { lock: boolean; prefix?: string }): Promise<SnapshotStore<JsonObject> & Partial<WorkflowLock>>;
  locks?(): Promise<LockProvider>;
  /** Caches with different prefixes from one context share storage (for `clear()` isolation). */
  cache?(options: CacheOptions): Promise<CacheProvider>;
  circuitBreaker?(): Promise<CircuitBreakerStore>;
  /** With `codec`, the store encodes checkpoint data with it; with `onDuplicate: 'replace'` a re-save overwrites. */
  checkpoints?(options: { codec?: Codec; onDuplicate?: 'reject' | 'replace' }): Promise<CheckpointStore>;
  idempotency?(): Promise<IdempotencyStore>;
  /**
   * A new process backend on this namespace per call, like another OS process on the same
   * database. The cases that run workers keep the workers' cursors in this context's `kv()`.
   */
  process?(): Promise<ProcessBackend>;
  /**
   * Begins a transaction on this namespace's database the way a user would, for the
   * `withTransaction` and `runOnce` cases (capability `transactions`): on Postgres a client
   * checked out of a pool after `BEGIN`, on MongoDB a `ClientSession` with a started
   * transaction. The suite commits or rolls it back; one it leaves open is rolled back when
   * the case ends.
   */
  beginTransaction?(): Promise<ConformanceTransaction>;
  /** Runs after each test, once the suite has closed every instance it opened. */
  cleanup?(): Promise<void>;
}

export interface ConformanceTransaction {
  /** What the stores' `withTransaction` takes. */
  readonly transaction: object;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** The contracts the suite covers, as they appear in test names. */
export type ContractName =
  | 'KeyValueStore'
  | 'SnapshotStore'
  | 'LockProvider'
  | 'CacheProvider'
  | 'CircuitBreakerStore'
  | 'CheckpointStore'
  | 'IdempotencyStore'
  | 'ProcessBackend';

/** A case that did not run on this adapter, and why (a missing factory or capability). */
export interface SkippedCase {
  adapter: string;
  contract: ContractName;
  case: string;
  /** e.g. "needs serverClock" or "the adapter has no locks() factory". */
  reason: string;
}

/**
 * Returned by every `describe…` function and filled in while the tests run: read it in an
 * `afterAll` (e.g. to assert that nothing was skipped). The suite also prints a summary.
 */
export interface ConformanceReport {
  readonly adapter: string;
  /** Cases that started (including those that then skipped). */
  started: number;
  readonly skipped: SkippedCase[];
}

export interface DescribeContractOptions {
  /** Collect into this report instead of a new one (no summary is printed: its owner prints it). */
  report?: ConformanceReport;
}
