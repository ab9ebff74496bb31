/**
 * The whole stowage conformance suite against the SQLite adapter in ../src, through the same
 * entry point any adapter author uses: `@stowage/core/conformance`.
 *
 * The adapter gives the suite two factories (kv, locks); every case of the other contracts is
 * skipped and reported as "the adapter has no …() factory". Cases that need a capability the
 * adapter does not claim (here: `wakeups`) are skipped and reported as "needs wakeups". The
 * suite prints that report at the end; the afterAll below checks it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect } from 'vitest';
import { describeConformance, listConformanceCases } from '@stowage/core/conformance';
import { SQLITE_CAPABILITIES, SqliteKeyValueStore, SqliteLockProvider } from '../src/index.ts';

const directory = mkdtempSync(join(tmpdir(), 'stowage-sqlite-conformance-'));
let databases = 0;

const report = describeConformance({
  name: 'sqlite (node:sqlite)',
  // Each test gets its own database file; every instance the suite opens from one context is a
  // separate connection to that file, like separate processes.
  createContext() {
    const path = join(directory, `case-${++databases}.sqlite`);
    return {
      kv: async () => new SqliteKeyValueStore(path),
      locks: async () => new SqliteLockProvider(path),
      cleanup: async () => {
        for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
      },
    };
  },
});

afterAll(() => {
  rmSync(directory, { recursive: true, force: true });

  const cases = listConformanceCases();
  const implemented = new Set(['KeyValueStore', 'LockProvider']);
  const total = Object.values(cases).reduce((sum, names) => sum + names.length, 0);
  expect(report.started).toBe(total);

  // Contracts without a factory: every one of their cases skipped, and said why.
  for (const [contract, names] of Object.entries(cases)) {
    if (implemented.has(contract)) continue;
    const skipped = report.skipped.filter((entry) => entry.contract === contract);
    expect(skipped.map((entry) => entry.case).sort()).toEqual([...names].sort());
    for (const entry of skipped) expect(entry.reason).toMatch(/^the adapter has no \w+\(\) factory$/);
  }

  // Implemented contracts: skipped only where a capability this adapter does not claim is needed.
  // and where a case needs a transaction of the database to join: this adapter offers none
  // (no withTransaction, no beginTransaction() in its context).
  const noTransaction = 'the adapter has no beginTransaction() factory';
  const gated = report.skipped.filter((entry) => implemented.has(entry.contract) && entry.reason !== noTransaction);
  expect(gated.map((entry) => `${entry.contract} › ${entry.case}: ${entry.reason}`)).toEqual([
    'LockProvider › waiting acquire is woken by release, not only by polling: needs wakeups',
  ]);
  expect(SQLITE_CAPABILITIES.wakeups).toBe(false);
});
