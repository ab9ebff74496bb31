import { afterAll, describe, test, type TestContext } from 'vitest';
import { hasCapability, type CapabilityName } from '../capabilities.js';
import type { CacheOptions, CacheProvider } from '../contracts/cache.js';
import type { CheckpointStore } from '../contracts/checkpoints.js';
import type { CircuitBreakerStore } from '../contracts/circuit-breaker.js';
import type { Closable, StowageResource } from '../contracts/common.js';
import type { IdempotencyStore } from '../contracts/idempotency.js';
import type { KeyValueStore } from '../contracts/kv.js';
import type { LockProvider } from '../contracts/locks.js';
import type { SnapshotStore, WorkflowLock } from '../contracts/snapshots.js';
import type { JsonObject } from '../json.js';
import type {
  ConformanceAdapter,
  ConformanceContext,
  ConformanceReport,
  ContractName,
  DescribeContractOptions,
  SkippedCase,
} from './types.js';

/** How long one case may take; cases sleep for short TTLs and talk to real databases. */
export const CASE_TIMEOUT = 30_000;

export type ConformanceCaseFn = (session: ConformanceSession) => Promise<void>;

export interface CaseOptions {
  /** Capabilities the case depends on; without them it is skipped (and reported). */
  needs?: CapabilityName[];
  /** Runs alone, not concurrently with other cases (it patches globals such as `Date`). */
  exclusive?: boolean;
}

export interface ConformanceCase extends CaseOptions {
  name: string;
  run: ConformanceCaseFn;
}

export interface ContractCases {
  contract: ContractName;
  cases: ConformanceCase[];
}

/** Collects a contract's cases: `it(name, fn)` or `it(name, { needs, exclusive }, fn)`. */
export function defineCases(
  contract: ContractName,
  define: (it: (name: string, optionsOrRun: CaseOptions | ConformanceCaseFn, run?: ConformanceCaseFn) => void) => void,
): ContractCases {
  const cases: ConformanceCase[] = [];
  define((name, optionsOrRun, run) => {
    const options = typeof optionsOrRun === 'function' ? {} : optionsOrRun;
    const body = typeof optionsOrRun === 'function' ? optionsOrRun : run;
    if (!body) throw new Error(`conformance case "${name}" has no body`);
    if (cases.some((existing) => existing.name === name)) throw new Error(`duplicate conformance case "${name}"`);
    cases.push({ name, ...options, run: body });
  });
  return { contract, cases };
}

type SnapshotInstance = SnapshotStore<JsonObject> & Partial<WorkflowLock>;

/**
 * One test's view of the adapter: opens instances through the test's context, tracks them,
 * and skips the case (recording why) when a factory or a needed capability is missing.
 */
export class ConformanceSession {
  readonly #context: ConformanceContext;
  readonly #opened: Closable[] = [];
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
  snapshots(options: { lock: boolean } = { lock: false }): Promise<SnapshotInstance> {
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
  checkpoints(): Promise<CheckpointStore> {
    return this.#open('checkpoints', (factory) => factory());
  }
  idempotency(): Promise<IdempotencyStore> {
    return this.#open('idempotency', (factory) => factory());
  }

  /** Opens `count` instances at once (like `count` processes starting together). */
  many<T>(count: number, open: (session: this) => Promise<T>): Promise<T[]> {
    return Promise.all(Array.from({ length: count }, () => open(this)));
  }

  /** Closes every instance this session opened; the first close error is rethrown. */
  async closeAll(): Promise<void> {
    const results = await Promise.allSettled(this.#opened.map((instance) => instance.close()));
    const failure = results.find((result) => result.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;
  }

  async #open<K extends Exclude<keyof ConformanceContext, 'cleanup'>, T extends StowageResource>(
    factoryName: K,
    open: (factory: NonNullable<ConformanceContext[K]>) => Promise<T>,
  ): Promise<T> {
    const factory = this.#context[factoryName];
    if (typeof factory !== 'function') this.#skip(`the adapter has no ${factoryName}() factory`);
    const bound = (factory as (...args: unknown[]) => unknown).bind(this.#context);
    const instance = await open(bound as NonNullable<ConformanceContext[K]>);
    this.#opened.push(instance);
    const missing = this.#needs.filter((name) => !hasCapability(instance.capabilities, name));
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
        CASE_TIMEOUT,
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
