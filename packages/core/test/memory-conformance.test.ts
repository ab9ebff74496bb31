import { afterAll, expect } from 'vitest';
import { describeConformance, listConformanceCases } from '../src/conformance/index.js';
import { TRANSACTION_CASE_NAMES } from '../src/conformance/cases/transactions.js';
import { memoryAdapter } from './memory-adapter.js';

const report = describeConformance(memoryAdapter);

afterAll(() => {
  // The in-memory adapter implements every contract and capability the suite gates on; it has
  // no database transaction for a store to join, so only those cases skip.
  expect(report.skipped.filter((skipped) => !TRANSACTION_CASE_NAMES.has(skipped.case))).toEqual([]);
  const total = Object.values(listConformanceCases()).reduce((sum, names) => sum + names.length, 0);
  expect(report.started).toBe(total);
});
