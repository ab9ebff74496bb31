/**
 * Capability gating and missing factories, run in the child vitest of
 * conformance-catches-bugs.test.ts (skipped cases must not show up in core's own run).
 * The memory adapter here claims no serverClock for its key-value store and has no
 * circuitBreaker() factory; the reports are written to STOWAGE_GATING_REPORT.
 */
import { writeFileSync } from 'node:fs';
import { afterAll } from 'vitest';
import { describeCircuitBreakerStore, describeKeyValueStore, formatSkipSummary } from '../../src/conformance/index.js';
import type { ConformanceAdapter } from '../../src/conformance/types.js';
import { MemoryKeyValueStore, MEMORY_CAPABILITIES, createMemoryStorage } from '../../src/memory/index.js';

export const GATED_ADAPTER_NAME = 'gated-memory';

const gated: ConformanceAdapter = {
  name: GATED_ADAPTER_NAME,
  createContext() {
    const storage = createMemoryStorage();
    return {
      kv: async () =>
        Object.defineProperty(new MemoryKeyValueStore({ storage }), 'capabilities', {
          value: { ...MEMORY_CAPABILITIES, serverClock: false },
        }),
    };
  },
};

const reports = [describeKeyValueStore(gated), describeCircuitBreakerStore(gated)];

afterAll(() => {
  const path = process.env.STOWAGE_GATING_REPORT;
  if (path) writeFileSync(path, JSON.stringify({ reports, summaries: reports.map(formatSkipSummary) }));
});
