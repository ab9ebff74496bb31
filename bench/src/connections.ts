/**
 * Connections per process, counted by the server: child processes each create every store
 * from one URL and run a mixed workload (connections-child.ts) while `pg_stat_activity` is
 * sampled every 50 ms by `application_name` (unique per process).
 *
 * Targets: one process holds at most pool size + 1 connections (one pool and one LISTEN
 * connection for all its stores; pg's default pool size is 10, stowage passes none); 20 such
 * processes at once on the server (100 connections by default) run without an error.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { config } from './config.ts';
import type { ConnectionsJob, ConnectionsReport } from './connections-child.ts';
import { check, sleep } from './sections.ts';
import type { Section, SectionTable } from './types.ts';

/** pg.Pool's default `max`: what a store created from a URL gets. */
export const DEFAULT_POOL_SIZE = 10;
const APP = 'stowage_bench_conn';

interface ProcessOutcome {
  calls: number;
  errors: Record<string, number>;
  firstError: string | null;
}

async function runChildren(jobs: ConnectionsJob[]): Promise<ProcessOutcome[]> {
  const script = fileURLToPath(new URL('./connections-child.ts', import.meta.url));
  return Promise.all(
    jobs.map(
      (job) =>
        new Promise<ProcessOutcome>((resolve) => {
          const child = fork(script, [JSON.stringify(job)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
          let outcome: ProcessOutcome | null = null;
          const timer = setTimeout(() => child.kill('SIGKILL'), job.workloadMs + 60_000);
          child.on('message', (message: ConnectionsReport) => {
            if (message.type === 'done') outcome = { calls: message.calls, errors: message.errors, firstError: message.firstError };
            if (message.type === 'error') outcome = { calls: 0, errors: { 'process failed': 1 }, firstError: message.message.split('\n')[0]! };
          });
          child.on('exit', (code) => {
            clearTimeout(timer);
            resolve(outcome ?? { calls: 0, errors: { 'process exited': 1 }, firstError: `exit code ${code}` });
          });
        }),
    ),
  );
}

/** Runs `jobs` while sampling connections per application name; returns the peaks. */
async function sampled(admin: pg.Client, jobs: ConnectionsJob[]): Promise<{ outcomes: ProcessOutcome[]; peakPerProcess: number; peakTotal: number }> {
  let running = true;
  let peakPerProcess = 0;
  let peakTotal = 0;
  const sampler = (async () => {
    while (running) {
      const { rows } = await admin.query(
        `SELECT application_name, count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1 GROUP BY 1`,
        [`${APP}%`],
      );
      const counts = rows.map((row: { n: number }) => row.n);
      peakPerProcess = Math.max(peakPerProcess, ...counts);
      peakTotal = Math.max(peakTotal, counts.reduce((a: number, b: number) => a + b, 0));
      await sleep(50);
    }
  })();
  try {
    const outcomes = await runChildren(jobs);
    return { outcomes, peakPerProcess, peakTotal };
  } finally {
    running = false;
    await sampler;
  }
}

function errorSummary(outcomes: ProcessOutcome[]): { total: number; calls: number; text: string; first: string | null } {
  const byCode: Record<string, number> = {};
  for (const o of outcomes) for (const [code, n] of Object.entries(o.errors)) byCode[code] = (byCode[code] ?? 0) + n;
  const total = Object.values(byCode).reduce((a, b) => a + b, 0);
  const calls = outcomes.reduce((sum, o) => sum + o.calls, 0);
  const text = total === 0 ? '0' : Object.entries(byCode).map(([code, n]) => `${n} ${code}`).join(', ');
  return { total, calls, text, first: outcomes.find((o) => o.firstError !== null)?.firstError ?? null };
}

export function connectionsSection(url: string, schema: string): Section {
  return {
    id: 'connections',
    async run(log) {
      const admin = new pg.Client({ connectionString: url, application_name: 'stowage_bench_admin' });
      await admin.connect();
      const limit = DEFAULT_POOL_SIZE + 1;
      const table: SectionTable = {
        id: 'connections',
        title: `connections: processes with every store from one URL, a mixed workload of ${config.connectionWorkloadMs / 1000} s at 16 in flight each (targets: one process ≤ pool size + 1 = ${limit} connections; ${config.connectionProcesses} processes: 0 errors)`,
        header: ['processes', 'stores created by', 'calls', 'errors', 'peak connections/process', 'peak connections, all'],
        align: ['r', 'l', 'r', 'l', 'r', 'r'],
        rows: [],
        notes: [],
      };
      try {
        const { rows } = await admin.query(
          `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved,
                  (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend') AS used`,
        );
        const server = rows[0] as { max: number; reserved: number; used: number };
        table.notes.push(`server: max_connections ${server.max} (${server.reserved} reserved for superusers), ${server.used} client connections in use when the run began`);
        const job = (i: number, mode: ConnectionsJob['mode']): ConnectionsJob => ({ url, schema, applicationName: `${APP}_${mode}_${i}`, workloadMs: config.connectionWorkloadMs, mode });
        for (const mode of ['urls', 'connect'] as const) {
          const run = await sampled(admin, [job(0, mode)]);
          const errors = errorSummary(run.outcomes);
          const label = mode === 'urls' ? 'new Store({ url }) each' : 'connect(url)';
          table.rows.push({
            cells: ['1', label, errors.calls.toLocaleString('en-US'), errors.text, String(run.peakPerProcess), String(run.peakTotal)],
            check: check(`one process, ${label}: connections`, `<= ${limit}`, `${run.peakPerProcess}${errors.total > 0 ? ` (${errors.text})` : ''}`, run.peakPerProcess <= limit && errors.total === 0),
            data: { ...run, errors },
          });
          log(`  connections, 1 process (${label}): peak ${run.peakPerProcess}, errors ${errors.text}`);
        }
        const many = await sampled(admin, Array.from({ length: config.connectionProcesses }, (_, i) => job(i, 'urls')));
        const errors = errorSummary(many.outcomes);
        table.rows.push({
          cells: [String(config.connectionProcesses), 'new Store({ url }) each', errors.calls.toLocaleString('en-US'), errors.text, String(many.peakPerProcess), String(many.peakTotal)],
          check: check(`${config.connectionProcesses} processes: errors`, '0', errors.text, errors.total === 0),
          data: { ...many, errors },
        });
        if (errors.first !== null) table.notes.push(`first error: ${errors.first}`);
        log(`  connections, ${config.connectionProcesses} processes: peak ${many.peakTotal}, errors ${errors.text}`);
      } catch (error) {
        table.error = (error as Error).message;
      } finally {
        await admin.end();
      }
      return [table];
    },
  };
}
