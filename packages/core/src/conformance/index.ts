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
 * vitest is an optional peer dependency of the conformance entry points only
 * (`@stowage/core/conformance` and `@stowage/core/conformance/crash`).
 */
import { cacheCases } from './cases/cache.js';
import { checkpointCases } from './cases/checkpoints.js';
import { circuitBreakerCases } from './cases/circuit-breaker.js';
import { describeWithSummary, joinCases, registerContract, type ContractCases } from './harness.js';
import { idempotencyCases } from './cases/idempotency.js';
import { keyValueCases } from './cases/kv/index.js';
import { lockCases } from './cases/locks/index.js';
import { processBackendCases } from './cases/process-backend.js';
import { processEngineCases } from './cases/process-engine.js';
import { snapshotCases } from './cases/snapshots.js';
import { statePersistenceCases } from './cases/state-persistence.js';
import {
  checkpointTransactionCases,
  idempotencyTransactionCases,
  keyValueTransactionCases,
  lockTransactionCases,
  processTransactionCases,
  processWithoutTransactionCases,
  snapshotTransactionCases,
} from './cases/transactions.js';
import type { ConformanceAdapter, ConformanceReport, DescribeContractOptions } from './types.js';

export type * from './types.js';
export { formatSkipSummary } from './harness.js';
export { ClientClockSkew, HOSTILE_KEYS, INVALID_KEYS, JSON_VALUES, NON_JSON_VALUES } from './helpers.js';
export { historyProblems, waitUntil } from './process-helpers.js';
/** The multi-process crash test; its own entry point is `@stowage/core/conformance/crash`. */
export * from './crash-scenario.js';

/** Each contract's cases, with its cases inside the caller's transaction (cases/transactions.ts); awaitly's key-value persistence runs on the kv store. */
const kvCases = joinCases(keyValueCases, statePersistenceCases, keyValueTransactionCases);
const snapshotsCases = joinCases(snapshotCases, snapshotTransactionCases);
const locksCases = joinCases(lockCases, lockTransactionCases);
const checkpointsCases = joinCases(checkpointCases, checkpointTransactionCases);
const idempotentCases = joinCases(idempotencyCases, idempotencyTransactionCases);
/** The ProcessBackend cases and the process engine running on the backend. */
const processCases = joinCases(processBackendCases, processEngineCases, processTransactionCases, processWithoutTransactionCases);

const ALL_CONTRACTS: readonly ContractCases[] = [kvCases, snapshotsCases, locksCases, cacheCases, circuitBreakerCases, checkpointsCases, idempotentCases, processCases];

function describeOne(contract: ContractCases) {
  return (adapter: ConformanceAdapter, options?: DescribeContractOptions): ConformanceReport =>
    describeWithSummary(adapter, `${contract.contract} conformance: ${adapter.name}`, options, (report) =>
      registerContract(adapter, contract, report),
    );
}

export const describeKeyValueStore = describeOne(kvCases);
export const describeSnapshotStore = describeOne(snapshotsCases);
export const describeLockProvider = describeOne(locksCases);
export const describeCacheProvider = describeOne(cacheCases);
export const describeCircuitBreakerStore = describeOne(circuitBreakerCases);
export const describeCheckpointStore = describeOne(checkpointsCases);
export const describeIdempotencyStore = describeOne(idempotentCases);
/**
 * The ProcessBackend cases and the process engine on top of it. The context needs a
 * `process()` factory (each call: a new backend on the same namespace, like another OS
 * process); the cases that run workers keep their cursors in the context's `kv()` and are
 * skipped without one.
 */
export const describeProcess = describeOne(processCases);

/** Every contract's cases, then one summary of what was skipped and why. */
export function describeConformance(adapter: ConformanceAdapter, options?: DescribeContractOptions): ConformanceReport {
  return describeWithSummary(adapter, `stowage conformance: ${adapter.name}`, options, (report) => {
    for (const contract of ALL_CONTRACTS) registerContract(adapter, contract, report);
  });
}

/** The names of every case, by contract: for adapter docs and for checking a run covered them all. */
export function listConformanceCases(): Record<string, string[]> {
  return Object.fromEntries(ALL_CONTRACTS.map((contract) => [contract.contract, contract.cases.map((c) => c.name)]));
}
