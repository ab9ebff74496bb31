import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { BROKEN_VARIANTS, type BrokenVariantName } from './broken/broken-adapters.js';
import { EXPECTED_FAILURES } from './broken/expectations.js';
import { processEngineCases } from '../src/conformance/cases/process-engine.js';
import { TRANSACTION_CASE_NAMES } from '../src/conformance/cases/transactions.js';

/** Cases the memory adapter skips: it has no database transaction to join. */
const inTransaction = (name: string) => TRANSACTION_CASE_NAMES.has(name);
import { listConformanceCases } from '../src/conformance/index.js';
import type { ConformanceReport } from '../src/conformance/types.js';

interface JsonAssertion {
  ancestorTitles: string[];
  title: string;
  status: 'passed' | 'failed' | 'skipped' | 'pending' | 'todo';
}
interface JsonReport {
  numTotalTests: number;
  testResults: { assertionResults: JsonAssertion[] }[];
}

const vitestBin = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
let results: JsonAssertion[] = [];
let gating: { reports: ConformanceReport[]; summaries: string[] };

/**
 * The conformance suite proves itself: it runs (in a child vitest, with the JSON reporter)
 * against deliberately broken variants of the memory adapter, and each bug must be caught.
 */
beforeAll(async () => {
  const dir = await mkdtemp(join(tmpdir(), 'stowage-broken-'));
  const outputFile = join(dir, 'report.json');
  const gatingFile = join(dir, 'gating.json');
  try {
    await promisify(execFile)(
      process.execPath,
      [vitestBin, 'run', '--config', join(import.meta.dirname, 'broken', 'vitest.config.ts'), '--reporter=json', `--outputFile=${outputFile}`],
      { cwd: import.meta.dirname, env: { ...process.env, STOWAGE_BROKEN_VARIANT: '', STOWAGE_GATING_REPORT: gatingFile }, maxBuffer: 64 * 1024 * 1024 },
    ).catch((error: { code?: number }) => {
      // vitest exits 1 because tests fail: that is the point. Anything else is a real error.
      if (error.code !== 1) throw error;
    });
    const report = JSON.parse(await readFile(outputFile, 'utf8')) as JsonReport;
    results = report.testResults.flatMap((file) => file.assertionResults);
    gating = JSON.parse(await readFile(gatingFile, 'utf8')) as typeof gating;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 240_000);

function resultsFor(variant: BrokenVariantName): JsonAssertion[] {
  return results.filter((result) => result.ancestorTitles[0]?.endsWith(`conformance: broken:${variant}`));
}

describe('the conformance suite catches every broken variant of the memory adapter', () => {
  it('ran every variant', () => {
    for (const variant of Object.keys(BROKEN_VARIANTS) as BrokenVariantName[]) {
      expect(resultsFor(variant).length, variant).toBeGreaterThan(0);
    }
  });

  for (const variant of Object.keys(EXPECTED_FAILURES) as BrokenVariantName[]) {
    it(`${variant}: the expected cases fail`, () => {
      const ran = resultsFor(variant);
      const failed = ran.filter((result) => result.status === 'failed');
      expect(failed.length, `${variant} should fail some cases`).toBeGreaterThan(0);
      for (const expected of EXPECTED_FAILURES[variant].cases) {
        const [contract, title] = expected.includes(' › ') ? expected.split(' › ') : [undefined, expected];
        const match = ran.filter((result) => result.title === title && (!contract || result.ancestorTitles.includes(contract!)));
        expect(match.length, `case "${expected}" ran on ${variant}`).toBeGreaterThan(0);
        expect(match.map((result) => result.status), `case "${expected}" on ${variant}`).toEqual(match.map(() => 'failed'));
      }
      // A broken variant is not an excuse to skip: nothing may be skipped on it either.
      expect(ran.filter((result) => result.status === 'skipped' && !inTransaction(result.title))).toEqual([]);
    });
  }
});

describe('capability gating and missing factories', () => {
  const gatedResults = (contract: string, adapter = 'gated-memory') =>
    results.filter((result) => result.ancestorTitles[0] === `${contract} conformance: ${adapter}`);

  it('a case needing a capability the instance lacks is skipped, recorded once and summarised', () => {
    const [kvReport] = gating.reports;
    const skewCase = 'skewed client clock: expiry follows the store clock, not Date';
    expect(kvReport!.skipped.filter((skipped) => !inTransaction(skipped.case))).toEqual([
      { adapter: 'gated-memory', contract: 'KeyValueStore', case: skewCase, reason: 'needs serverClock' },
    ]);
    expect(gating.summaries[0]).toContain(`\n  KeyValueStore › ${skewCase} — needs serverClock`);
    const kv = gatedResults('KeyValueStore').filter((result) => !inTransaction(result.title));
    expect(kv.filter((result) => result.status === 'skipped').map((result) => result.title)).toEqual([skewCase]);
    const kvCases = listConformanceCases().KeyValueStore!.filter((name) => !inTransaction(name));
    expect(kv.filter((result) => result.status === 'passed')).toHaveLength(kvCases.length - 1);
  });

  it('a missing factory skips every case of that contract, with the reason', () => {
    const names = listConformanceCases().CircuitBreakerStore!;
    const [, breakerReport] = gating.reports;
    expect(breakerReport!.skipped.map((skipped) => skipped.case).sort()).toEqual([...names].sort());
    for (const skipped of breakerReport!.skipped) expect(skipped.reason).toBe('the adapter has no circuitBreaker() factory');
    expect(gatedResults('CircuitBreakerStore').map((result) => result.status)).toEqual(names.map(() => 'skipped'));
  });

  it('a missing process() factory skips every process case like any other factory', () => {
    const names = listConformanceCases().ProcessBackend!;
    const [, , processReport] = gating.reports;
    expect(processReport!.skipped.map((skipped) => skipped.case).sort()).toEqual([...names].sort());
    for (const skipped of processReport!.skipped) {
      expect(skipped).toMatchObject({ contract: 'ProcessBackend', reason: 'the adapter has no process() factory' });
    }
    expect(gatedResults('ProcessBackend').map((result) => result.status)).toEqual(names.map(() => 'skipped'));
  });

  it('with an async createContext the process cases run; those needing worker cursors skip without kv()', () => {
    const engine = processEngineCases.cases.map((c) => c.name);
    const skippedHere = [...engine, ...listConformanceCases().ProcessBackend!.filter(inTransaction)];
    const [, , , processOnlyReport] = gating.reports;
    expect(processOnlyReport!.started).toBe(listConformanceCases().ProcessBackend!.length);
    expect(processOnlyReport!.skipped.map((skipped) => skipped.case).sort()).toEqual([...skippedHere].sort());
    for (const skipped of processOnlyReport!.skipped.filter((skipped) => engine.includes(skipped.case))) {
      expect(skipped.reason).toBe('needs a kv() factory for worker cursors');
    }
    const ran = gatedResults('ProcessBackend', 'process-only-memory');
    expect(ran.filter((result) => result.status === 'passed').map((result) => result.title).sort()).toEqual(
      listConformanceCases().ProcessBackend!.filter((name) => !skippedHere.includes(name)).sort(),
    );
  });
});
