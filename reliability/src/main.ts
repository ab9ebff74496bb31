/**
 * pnpm test:reliability — the reliability and security battery (issue 8).
 *
 *   node src/main.ts [--quick] [--backend memory,pglite,postgres,pgbouncer,mongo,jongodb] [--check lock,crash,…,failover]
 *                    [--restart-postgres | --no-restart-postgres] [--json results.json]
 *
 * Runs the self-check, then every check on every backend in turn, prints one table per
 * backend and an overview, and exits non-zero when any invariant fails (or, under CI=true,
 * when an expected backend is missing).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { isCI } from '@stowage/test-env';
import { adapterLoads, findTarget, openBackend } from './backends/index.ts';
import { ALL_BACKENDS, type Backend, type BackendName } from './backends/types.ts';
import { budgetFor, CHECKS, FULL, QUICK, type Budget, type CheckName } from './config.ts';
import { BackendReport, describeError, renderOverview, renderTable } from './report.ts';
import { crashRecovery } from './checks/crash-recovery.ts';
import { hostileInput } from './checks/hostile-input.ts';
import { lockSafety } from './checks/lock-safety.ts';
import { lostUpdates } from './checks/lost-updates.ts';
import { outage, restartPolicy, unhandled } from './checks/outage.ts';
import { resourceLeaks } from './checks/resource-leaks.ts';
import { selfCheck } from './checks/self-check.ts';
import { formatMs, settleWithin } from './util.ts';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    backend: { type: 'string' },
    check: { type: 'string' },
    'restart-postgres': { type: 'boolean' },
    'no-restart-postgres': { type: 'boolean' },
    json: { type: 'string' },
  },
});

const budget: Budget = values.quick ? QUICK : FULL;
const backends = selectBackends(values.backend);
const checks = selectChecks(values.check);
const restart = restartPolicy(values['no-restart-postgres'] ? false : values['restart-postgres']);
// Lower case, a valid SQL identifier and MongoDB database name, unique per run.
const namespace = `rel_${Date.now().toString(36)}_${process.pid}`;

process.on('unhandledRejection', (reason) => {
  unhandled.count += 1;
  unhandled.last = describeError(reason);
  console.error(`[reliability] unhandled rejection: ${unhandled.last}`);
});

/**
 * Each check, given the budget for its backend. The later checks are loaded when they run: one
 * whose adapter API is missing (an older build of a package) then fails on its own instead of
 * stopping the battery.
 */
const RUNNERS: Record<CheckName, (backend: Backend, report: BackendReport, budget: Budget) => Promise<void>> = {
  'lock safety': (backend, report, b) => lockSafety(backend, report, b.lock),
  'crash recovery': (backend, report, b) => crashRecovery(backend, report, b.crash),
  'lost updates': (backend, report, b) => lostUpdates(backend, report, b.lostUpdates),
  outage: (backend, report, b) => outage(backend, report, b.outage, { restartPostgres: restart }),
  'hostile input': (backend, report, b) => hostileInput(backend, report, b.hostile),
  'resource leaks': (backend, report, b) => resourceLeaks(backend, report, b.leaks),
  errors: async (backend, report) => (await import('./checks/errors.ts')).errors(backend, report),
  'least privilege': async (backend, report) => (await import('./checks/least-privilege.ts')).leastPrivilege(backend, report),
  shutdown: async (backend, report, b) => (await import('./checks/shutdown.ts')).shutdown(backend, report, b.shutdown),
  versions: async (backend, report, b) => (await import('./checks/versions.ts')).versions(backend, report, b.versions),
  namespaces: async (backend, report) => (await import('./checks/namespaces.ts')).namespaces(backend, report),
  batches: async (backend, report, b) => (await import('./checks/batches.ts')).batches(backend, report, b.batches),
  connections: async (backend, report, b) => (await import('./checks/connections.ts')).connections(backend, report, b.connections),
  failover: async (backend, report, b) => (await import('./checks/failover.ts')).failover(backend, report, b.failover),
};

/** Checks that can only hold on a server that applies concurrent single-document updates atomically. */
const NEEDS_ATOMIC_SERVER: readonly CheckName[] = ['lock safety', 'lost updates'];

const log = (line: string) => console.log(`[reliability] ${line}`);

async function main(): Promise<number> {
  const started = performance.now();
  log(`${values.quick ? 'quick' : 'full'} run, namespace ${namespace}, backends ${backends.join(', ')}${isCI ? ' (CI)' : ''}`);
  const reports: BackendReport[] = [];

  const self = new BackendReport('self-check', 'each detector against a deliberately broken in-memory implementation');
  await timed('self-check', () => selfCheck(self, budget).catch((error: unknown) => self.crashed('self-check', error)));
  reports.push(self);
  console.log(`\n${renderTable(self)}\n`);

  for (const name of backends) {
    const report = await runBackend(name);
    reports.push(report);
    console.log(`\n${renderTable(report)}\n`);
  }

  console.log(`\n=== reliability summary (${values.quick ? 'quick' : 'full'} run, ${formatMs(performance.now() - started)}) ===\n`);
  for (const report of reports) {
    console.log(`${renderTable(report)}\n`);
    for (const note of report.notes) console.log(`  ! ${note}`);
    if (report.notes.length > 0) console.log('');
  }
  console.log(renderOverview(reports, ['self-check', 'backend', ...checks]));
  if (values.json) writeFileSync(values.json, JSON.stringify(reports, null, 2));

  // The failures once more, last: CI keeps only the tail of the log.
  for (const report of reports) {
    for (const row of report.rows.filter((r) => r.verdict === 'FAIL')) {
      console.log(`FAIL ${report.backend} / ${row.check}: ${row.measure}: ${row.value} (required ${row.required})`);
    }
    if (report.failed) for (const note of report.notes) console.log(`  ! ${report.backend}: ${note}`);
  }
  const rows = reports.flatMap((report) => report.rows);
  const passed = rows.filter((row) => row.verdict === 'PASS').length;
  const failed = rows.filter((row) => row.verdict === 'FAIL').length;
  const skipped = rows.filter((row) => row.verdict === 'n/a').length;
  console.log(`\nreliability: ${passed} passed, ${failed} failed, ${skipped} skipped`);
  return failed > 0 ? 1 : 0;
}

async function runBackend(name: BackendName): Promise<BackendReport> {
  const found = await findTarget(name, namespace);
  if (!('target' in found)) {
    const report = new BackendReport(name, 'not available');
    if (found.fails) {
      report.expect('backend', 'found', 'no', 'yes (CI=true)', false);
      report.note(found.unavailable);
    } else {
      report.notApplicable('backend', found.unavailable);
    }
    return report;
  }
  const report = new BackendReport(name, found.target.label);
  log(`${name}: ${found.target.label}`);
  try {
    const loadError = await adapterLoads(found.target);
    if (loadError !== null) {
      report.expect('backend', 'adapter package loads', 'no', 'yes', false);
      report.note(loadError);
      return report;
    }
    const backend = await openBackend(found.target);
    try {
      const atomicity = backend.serverAtomicity && checks.some((check) => NEEDS_ATOMIC_SERVER.includes(check)) ? await backend.serverAtomicity() : null;
      if (atomicity !== null) {
        log(`${name}: ${atomicity}`);
        report.note(`${NEEDS_ATOMIC_SERVER.join(' and ')} not run: ${atomicity}. No adapter can be correct on such a server; run against a real MongoDB (STOWAGE_MONGO_URL) to measure them.`);
      }
      for (const check of checks) {
        if (atomicity !== null && NEEDS_ATOMIC_SERVER.includes(check)) {
          report.notApplicable(check, `not run: ${atomicity}`);
          continue;
        }
        await timed(`${name}: ${check}`, () =>
          RUNNERS[check](backend, report, budgetFor(name, budget)).catch((error: unknown) => {
            report.crashed(check, error);
            console.error(error);
          }),
        );
      }
    } finally {
      await timed(`${name}: clean-up`, async () => {
        const cleanup = await settleWithin(60_000, () => backend.cleanup());
        if (cleanup.status === 'rejected') report.note(`clean-up failed: ${describeError(cleanup.reason)}`);
        if (cleanup.status === 'hung') report.note(`clean-up did not finish within 60 s (namespace ${namespace} may be left behind)`);
        await backend.close();
      });
    }
  } finally {
    await found.stop();
  }
  return report;
}

async function timed(what: string, fn: () => Promise<void>): Promise<void> {
  const started = performance.now();
  log(`${what} …`);
  await fn();
  log(`${what} done in ${formatMs(performance.now() - started)}`);
}

function selectBackends(option: string | undefined): BackendName[] {
  if (!option) return [...ALL_BACKENDS];
  const names = option.split(',').map((name) => name.trim());
  for (const name of names) {
    if (!(ALL_BACKENDS as readonly string[]).includes(name)) throw new Error(`unknown backend "${name}" (known: ${ALL_BACKENDS.join(', ')})`);
  }
  return names as BackendName[];
}

function selectChecks(option: string | undefined): CheckName[] {
  if (!option) return [...CHECKS];
  return option.split(',').map((word) => {
    const match = CHECKS.find((check) => check.startsWith(word.trim().toLowerCase()));
    if (!match) throw new Error(`unknown check "${word}" (known: ${CHECKS.join(', ')})`);
    return match;
  });
}

process.exitCode = await main();
// Whatever a hung clean-up left pending must not keep CI waiting: the verdict is already out.
setTimeout(() => {
  console.error('[reliability] still busy 30 s after the summary (a clean-up hung?); exiting');
  process.exit(process.exitCode ?? 1);
}, 30_000).unref();
