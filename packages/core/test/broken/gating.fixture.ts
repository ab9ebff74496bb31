/**
 * Capability gating and missing factories, run in the child vitest of
 * conformance-catches-bugs.test.ts (skipped cases must not show up in core's own run).
 * The memory adapter here claims no serverClock for its key-value store and has no
 * circuitBreaker() or process() factory; a second one (with an async createContext) has a
 * process() factory but no kv() for worker cursors. The reports are written to
 * STOWAGE_GATING_REPORT.
 */
import { writeFileSync } from 'node:fs';
import { afterAll } from 'vitest';
import { describeCircuitBreakerStore, describeKeyValueStore, describeProcess, formatSkipSummary } from '../../src/conformance/index.js';
import type { ConformanceAdapter } from '../../src/conformance/types.js';
import { MemoryKeyValueStore, MemoryProcessBackend, MEMORY_CAPABILITIES, createMemoryStorage } from '../../src/memory/index.js';

export const GATED_ADAPTER_NAME = 'gated-memory';
export const PROCESS_ONLY_ADAPTER_NAME = 'process-only-memory';

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

const processOnly: ConformanceAdapter = {
  name: PROCESS_ONLY_ADAPTER_NAME,
  async createContext() {
    const storage = createMemoryStorage();
    return { process: async () => new MemoryProcessBackend({ storage }) };
  },
};

const reports = [
  describeKeyValueStore(gated),
  describeCircuitBreakerStore(gated),
  describeProcess(gated),
  describeProcess(processOnly),
];

afterAll(() => {
  const path = process.env.STOWAGE_GATING_REPORT;
  if (path) writeFileSync(path, JSON.stringify({ reports, summaries: reports.map(formatSkipSummary) }));
});
