import { afterAll, expect } from 'vitest';
import { describeConformance, listConformanceCases } from '../src/conformance/index.js';
import { memoryAdapter } from './memory-adapter.js';

const report = describeConformance(memoryAdapter);

afterAll(() => {
  // The in-memory adapter implements every contract and capability the suite gates on.
  expect(report.skipped).toEqual([]);
  const total = Object.values(listConformanceCases()).reduce((sum, names) => sum + names.length, 0);
  expect(report.started).toBe(total);
});
