/**
 * `@stowage/core/conformance`: the vitest suite every stowage adapter passes. Call one
 * `describe…` per contract, or {@link describeConformance} for all of them, at the top level
 * of a test file:
 *
 * ```ts
 * import { describeConformance } from '@stowage/core/conformance';
 * describeConformance({ name: 'my adapter', createContext: () => ({ kv: async () => new MyStore() }) });
 * ```
 *
 * vitest is an optional peer dependency of this entry point only.
 */
import { cacheCases } from './cache.js';
import { checkpointCases } from './checkpoints.js';
import { circuitBreakerCases } from './circuit-breaker.js';
import { describeWithSummary, registerContract, type ContractCases } from './harness.js';
import { idempotencyCases } from './idempotency.js';
import { keyValueCases } from './kv.js';
import { lockCases } from './locks.js';
import { adapterHasProcessFactory, registerProcessCases } from './process.js';
import { snapshotCases } from './snapshots.js';
import type { ConformanceAdapter, ConformanceReport, DescribeContractOptions } from './types.js';

export type * from './types.js';
export { formatSkipSummary } from './harness.js';
export { ClientClockSkew, HOSTILE_KEYS, INVALID_KEYS, JSON_VALUES, NON_JSON_VALUES } from './helpers.js';

const ALL_CONTRACTS: readonly ContractCases[] = [
  keyValueCases,
  snapshotCases,
  lockCases,
  cacheCases,
  circuitBreakerCases,
  checkpointCases,
  idempotencyCases,
];

function describeOne(contract: ContractCases) {
  return (adapter: ConformanceAdapter, options?: DescribeContractOptions): ConformanceReport =>
    describeWithSummary(adapter, `${contract.contract} conformance: ${adapter.name}`, options, (report) =>
      registerContract(adapter, contract, report),
    );
}

export const describeKeyValueStore = describeOne(keyValueCases);
export const describeSnapshotStore = describeOne(snapshotCases);
export const describeLockProvider = describeOne(lockCases);
export const describeCacheProvider = describeOne(cacheCases);
export const describeCircuitBreakerStore = describeOne(circuitBreakerCases);
export const describeCheckpointStore = describeOne(checkpointCases);
export const describeIdempotencyStore = describeOne(idempotencyCases);

/** Every contract's cases, then one summary of what was skipped and why. */
export function describeConformance(adapter: ConformanceAdapter, options?: DescribeContractOptions): ConformanceReport {
  return describeWithSummary(adapter, `stowage conformance: ${adapter.name}`, options, (report) => {
    for (const contract of ALL_CONTRACTS) registerContract(adapter, contract, report);
    // The state-machine cases run for adapters whose context has a process() factory.
    if (adapterHasProcessFactory(adapter)) registerProcessCases(adapter, report);
  });
}

/** The names of every case, by contract: for adapter docs and for checking a run covered them all. */
export function listConformanceCases(): Record<string, string[]> {
  return Object.fromEntries(ALL_CONTRACTS.map((contract) => [contract.contract, contract.cases.map((c) => c.name)]));
}
export { describeProcess, registerProcessCases, adapterHasProcessFactory, listProcessCases, historyProblems, waitUntil, runProcessCrashScenario, runCrashTestWorker, expectCrashScenarioInvariants, CRASH_TEST_PROCESS, type CrashScenarioOptions, type CrashScenarioResult, type CrashTestLine, type CrashTestWorkerOptions } from './process.js';
