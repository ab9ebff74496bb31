import { afterAll, describe, test, type TestContext } from 'vitest';
import { hasCapability, type CapabilityName } from '../capabilities.js';
import type { CacheOptions, CacheProvider } from '../contracts/cache.js';
import type { CheckpointStore } from '../contracts/checkpoints.js';
import type { CircuitBreakerStore } from '../contracts/circuit-breaker.js';
import type { Closable, StowageResource } from '../contracts/common.js';
import type { IdempotencyStore } from '../contracts/idempotency.js';
import type { KeyValueStore } from '../contracts/kv.js';
import type { LockProvider } from '../contracts/locks.js';
import type { BoundProcess, ProcessBackend, ProcessWorker, ProcessWorkerOptions } from '../contracts/process.js';
import type { SnapshotStore, WorkflowLock } from '../contracts/snapshots.js';
import type { Codec, JsonObject } from '../json.js';
import type {
  ConformanceAdapter,
  ConformanceContext,
  ConformanceReport,
  ContractName,
  DescribeContractOptions,
  SkippedCase,
  ConformanceTransaction,
} from './types.js';

/** How long one case may take unless it says otherwise; cases sleep for short TTLs and talk to real databases. */
export const CASE_TIMEOUT = 30_000;

/**
 * Workers opened by a case poll, scan and save cursors often: a case waits for them, and the
 * defaults (1 s) would only make it slower.
 */
const CASE_WORKER_OPTIONS = {
  pollInterval: 100,
  recoveryInterval: 100,
  cursorInterval: 50,
} as const satisfies Partial<ProcessWorkerOptions>;

export type ConformanceCaseFn = (session: ConformanceSession) => Promise<void>;

export interface CaseOptions {
  /** Capabilities the case depends on; without them it is skipped (and reported). */
  needs?: CapabilityName[];
  /**
   * Runs alone, not concurrently with other cases: it patches globals such as `Date`, or runs
   * workers that should not compete with other cases for the CPU.
   */
  exclusive?: boolean;
  /** How long the case may take, in ms (default {@link CASE_TIMEOUT}). */
  timeout?: number;
}

export interface ConformanceCase extends CaseOptions {
  name: string;
  run: ConformanceCaseFn;
}

export interface ContractCases {
  contract: ContractName;
  cases: ConformanceCase[];
}

type DefineCase = (name: string, optionsOrRun: CaseOptions | ConformanceCaseFn, run?: ConformanceCaseFn) => void;

/**
 * Collects a contract's cases: `it(name, fn)` or `it(name, { needs, exclusive, timeout }, fn)`.
 * Options given to `defineCases` itself apply to every case; a case's own options override them.
 */
export function defineCases(contract: ContractName, define: (it: DefineCase) => void): ContractCases;
export function defineCases(contract: ContractName, defaults: CaseOptions, define: (it: DefineCase) => void): ContractCases;
export function defineCases(
  contract: ContractName,
  defaultsOrDefine: CaseOptions | ((it: DefineCase) => void),
  maybeDefine?: (it: DefineCase) => void,
): ContractCases {
  const defaults = typeof defaultsOrDefine === 'function' ? {} : defaultsOrDefine;
  const define = typeof defaultsOrDefine === 'function' ? defaultsOrDefine : maybeDefine!;
  const cases: ConformanceCase[] = [];
  define((name, optionsOrRun, run) => {
    const options = typeof optionsOrRun === 'function' ? {} : optionsOrRun;
    const body = typeof optionsOrRun === 'function' ? optionsOrRun : run;
    if (!body) throw new Error(`conformance case "${name}" has no body`);
    if (cases.some((existing) => existing.name === name)) throw new Error(`duplicate conformance case "${name}"`);
    cases.push({ name, ...defaults, ...options, run: body });
  });
  return { contract, cases };
}

/** One contract's cases collected in several files, as one list (names stay unique). */
export function joinCases(...parts: ContractCases[]): ContractCases {
  const contract = parts[0]!.contract;
  const cases: ConformanceCase[] = [];
  for (const part of parts) {
    if (part.contract !== contract) throw new Error(`cannot join ${part.contract} cases into ${contract}`);
    for (const conformanceCase of part.cases) {
      if (cases.some((existing) => existing.name === conformanceCase.name)) throw new Error(`duplicate conformance case "${conformanceCase.name}"`);
      cases.push(conformanceCase);
    }
  }
  return { contract, cases };
}

type SnapshotInstance = SnapshotStore<JsonObject> & Partial<WorkflowLock>;

/**
 * One test's view of the adapter: opens instances through the test's context, tracks them
 * (and the workers a case starts), and skips the case (recording why) when a factory or a
 * needed capability is missing.
 */
export class ConformanceSession {
  readonly #context: ConformanceContext;
  readonly #opened: Closable[] = [];
  readonly #workers: ProcessWorker[] = [];
  readonly #skip: (reason: string) => never;
  readonly #needs: readonly CapabilityName[];

  constructor(context: ConformanceContext, needs: readonly CapabilityName[], skip: (reason: string) => never) {
    this.#context = context;
    this.#needs = needs;
    this.#skip = skip;
  }

  kv(): Promise<KeyValueStore> {
    return this.#open('kv', (factory) => factory());
  }
  snapshots(options: { lock: boolean; prefix?: string } = { lock: false }): Promise<SnapshotInstance> {
    return this.#open('snapshots', (factory) => factory(options));
  }
  locks(): Promise<LockProvider> {
    return this.#open('locks', (factory) => factory());
  }
  cache(options: CacheOptions = {}): Promise<CacheProvider> {
    return this.#open('cache', (factory) => factory(options));
  }
  circuitBreaker(): Promise<CircuitBreakerStore> {
    return this.#open('circuitBreaker', (factory) => factory());
  }
  checkpoints(options: { codec?: Codec; onDuplicate?: 'reject' | 'replace' } = {}): Promise<CheckpointStore> {
    return this.#open('checkpoints', (factory) => factory(options));
  }
  idempotency(): Promise<IdempotencyStore> {
    return this.#open('idempotency', (factory) => factory());
  }
  /** A new process backend on the test's namespace (each call like another OS process on the same database). */
  process(): Promise<ProcessBackend> {
    return this.#open('process', (factory) => factory());
  }

  /**
   * A KeyValueStore for process workers' cursors: the adapter's own `kv()`. Cursors are not
   * what a case checks, so the case's capability needs do not apply to it.
   */
  cursors(): Promise<KeyValueStore> {
    return this.#open('kv', (factory) => factory(), { missing: 'needs a kv() factory for worker cursors', gated: false });
  }

  /** A worker of `bound` (with short poll intervals unless `options` say otherwise), stopped when the case ends. */
  worker(bound: BoundProcess, options: ProcessWorkerOptions): ProcessWorker {
    const worker = bound.worker({ ...CASE_WORKER_OPTIONS, ...options });
    this.#workers.push(worker);
    return worker;
  }

  /**
   * Skips the case unless the adapter can open transactions of its database the way a user
   * would (`beginTransaction`): an in-memory adapter has none to join or to begin.
   */
  needsTransactions(): void {
    if (typeof this.#context.beginTransaction !== 'function') this.#skip('the adapter has no beginTransaction() factory');
  }

  /**
   * A transaction of the adapter's (`beginTransaction`): the case skips without one. Rolled
   * back when the case ends unless the case committed or rolled it back.
   */
  async transaction(): Promise<ConformanceTransaction> {
    this.needsTransactions();
    const begun = await this.#context.beginTransaction!();
    let open = true;
    const end = (how: () => Promise<void>) => async () => {
      if (!open) return;
      open = false;
      await how();
    };
    const transaction = { transaction: begun.transaction, commit: end(() => begun.commit()), rollback: end(() => begun.rollback()) };
    this.#opened.push({ close: transaction.rollback });
    return transaction;
  }

  /** Skips the case, recording `reason` in the report. */
  skip(reason: string): never {
    return this.#skip(reason);
  }

  /** Opens `count` instances at once (like `count` processes starting together). */
  many<T>(count: number, open: (session: this) => Promise<T>): Promise<T[]> {
    return Promise.all(Array.from({ length: count }, () => open(this)));
  }

  /** Stops the workers, then closes every instance this session opened; the first close error is rethrown. */
  async closeAll(): Promise<void> {
    await Promise.allSettled(this.#workers.map((worker) => worker.stop()));
    const results = await Promise.allSettled(this.#opened.map((instance) => instance.close()));
    const failure = results.find((result) => result.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;
  }

  async #open<K extends Exclude<keyof ConformanceContext, 'cleanup'>, T extends StowageResource>(
    factoryName: K,
    open: (factory: NonNullable<ConformanceContext[K]>) => Promise<T>,
    how: { missing?: string; gated?: boolean } = {},
  ): Promise<T> {
    const factory = this.#context[factoryName];
    if (typeof factory !== 'function') this.#skip(how.missing ?? `the adapter has no ${factoryName}() factory`);
    const withContext = (factory as (...args: unknown[]) => unknown).bind(this.#context);
    const instance = await open(withContext as NonNullable<ConformanceContext[K]>);
    this.#opened.push(instance);
    const missing = (how.gated ?? true) ? this.#needs.filter((name) => !hasCapability(instance.capabilities, name)) : [];
    if (missing.length > 0) this.#skip(`needs ${missing.join(', ')}`);
    return instance;
  }
}

export function createReport(adapter: ConformanceAdapter): ConformanceReport {
  return { adapter: adapter.name, started: 0, skipped: [] };
}

/** One line per skipped case, or a line saying that none was. */
export function formatSkipSummary(report: ConformanceReport): string {
  if (report.skipped.length === 0) {
    return `stowage conformance: 0 cases skipped on ${report.adapter} (${report.started} cases ran)`;
  }
  const lines = report.skipped.map((skipped) => `  ${skipped.contract} › ${skipped.case} — ${skipped.reason}`);
  const count = report.skipped.length;
  return [`stowage conformance: ${count} ${count === 1 ? 'case' : 'cases'} skipped on ${report.adapter}:`, ...lines].join('\n');
}

/** Registers a contract's cases inside the current `describe`. */
export function registerContract(adapter: ConformanceAdapter, contract: ContractCases, report: ConformanceReport): void {
  describe(contract.contract, () => {
    // Cases that patch globals run after the concurrent ones, one at a time.
    const ordered = [...contract.cases.filter((c) => !c.exclusive), ...contract.cases.filter((c) => c.exclusive)];
    for (const conformanceCase of ordered) {
      const register = conformanceCase.exclusive ? test : test.concurrent;
      register(
        conformanceCase.name,
        (testContext: TestContext) => runCase(adapter, contract.contract, conformanceCase, report, testContext),
        conformanceCase.timeout ?? CASE_TIMEOUT,
      );
    }
  });
}

async function runCase(
  adapter: ConformanceAdapter,
  contract: ContractName,
  conformanceCase: ConformanceCase,
  report: ConformanceReport,
  testContext: TestContext,
): Promise<void> {
  let skipRecorded = false;
  const skip = (reason: string): never => {
    // Instances opened at once can each find the same gap: record the case once.
    if (!skipRecorded) {
      skipRecorded = true;
      const skipped: SkippedCase = { adapter: adapter.name, contract, case: conformanceCase.name, reason };
      report.skipped.push(skipped);
    }
    return testContext.skip(`${reason} (${adapter.name})`);
  };
  const context = await adapter.createContext();
  const session = new ConformanceSession(context, conformanceCase.needs ?? [], skip);
  let outcome: { error: unknown } | null = null;
  try {
    report.started++;
    await conformanceCase.run(session);
  } catch (error) {
    outcome = { error };
  }
  // Close what the case opened and clean up even when it failed or skipped; report the first error.
  const [closing] = await Promise.allSettled([session.closeAll()]);
  const [cleaning] = await Promise.allSettled([context.cleanup?.()]);
  if (outcome) throw outcome.error;
  if (closing!.status === 'rejected') throw closing!.reason;
  if (cleaning!.status === 'rejected') throw cleaning!.reason;
}

/** Wraps registration in a top-level `describe` that prints the skip summary at the end. */
export function describeWithSummary(
  adapter: ConformanceAdapter,
  title: string,
  options: DescribeContractOptions | undefined,
  register: (report: ConformanceReport) => void,
): ConformanceReport {
  const report = options?.report ?? createReport(adapter);
  describe(title, () => {
    register(report);
    if (!options?.report) {
      afterAll(() => {
        console.log(formatSkipSummary(report));
      });
    }
  });
  return report;
}
