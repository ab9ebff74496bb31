/**
 * Registers the conformance suite against broken variants (or only the one named in
 * STOWAGE_BROKEN_VARIANT). Used by the *.fixture.ts files, which are not part of `pnpm test`
 * directly: conformance-catches-bugs.test.ts runs them in a child vitest and checks that
 * each variant fails where expected.
 */
import {
  describeCacheProvider,
  describeCheckpointStore,
  describeCircuitBreakerStore,
  describeIdempotencyStore,
  describeKeyValueStore,
  describeLockProvider,
  describeProcess,
  describeSnapshotStore,
} from '../../src/conformance/index.js';
import type { ConformanceAdapter, ConformanceReport, ContractName } from '../../src/conformance/types.js';
import { BROKEN_VARIANTS, brokenAdapter, type BrokenVariantName } from './broken-adapters.js';
import { EXPECTED_FAILURES } from './expectations.js';

const DESCRIBE: Record<ContractName, (adapter: ConformanceAdapter) => ConformanceReport> = {
  KeyValueStore: describeKeyValueStore,
  SnapshotStore: describeSnapshotStore,
  LockProvider: describeLockProvider,
  CacheProvider: describeCacheProvider,
  CircuitBreakerStore: describeCircuitBreakerStore,
  CheckpointStore: describeCheckpointStore,
  IdempotencyStore: describeIdempotencyStore,
  ProcessBackend: describeProcess,
};

export function describeBrokenVariants(variants: BrokenVariantName[]): void {
  const only = process.env.STOWAGE_BROKEN_VARIANT as BrokenVariantName | undefined;
  for (const variant of variants) {
    if (only && variant !== only) continue;
    for (const contract of EXPECTED_FAILURES[variant].contracts) DESCRIBE[contract](brokenAdapter(variant));
  }
}

/** The variant that runs six contracts gets a file (a worker) of its own. */
export const SLOW_VARIANTS: BrokenVariantName[] = ['ttl-on-client-clock'];
export const OTHER_VARIANTS = (Object.keys(BROKEN_VARIANTS) as BrokenVariantName[]).filter(
  (variant) => !SLOW_VARIANTS.includes(variant),
);
