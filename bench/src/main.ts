/**
 * pnpm bench: every backend found, every operation, stowage against the raw driver running
 * the same statements and against peer libraries, on the same servers, in one run. Prints a
 * table and the unmet targets; writes bench-results/results.json and bench-results/chart.svg.
 * Always exits 0 when it could run: the bench is a report, not a gate.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { findMongoServer, findPostgresServer } from '@stowage/test-env';
import { startPgliteProcess } from './backends/pglite.ts';
import { mongoBackend } from './backends/mongo.ts';
import { postgresBackend } from './backends/postgres.ts';
import { renderChart } from './chart.ts';
import { config } from './config.ts';
import { collectUnmet, renderBackend, renderSummary, type BackendReport, type BenchReport } from './report.ts';
import { runOp } from './run-op.ts';
import { failedTable } from './sections.ts';
import { formatRatio } from './stats.ts';
import type { BackendBench } from './types.ts';

const log = (line: string): void => void process.stderr.write(`[bench] ${line}\n`);

interface Candidate {
  id: 'pglite' | 'postgres' | 'mongo';
  start(): Promise<{ bench: BackendBench; stop(): Promise<void> } | { missing: string }>;
}

const candidates: Candidate[] = [
  {
    id: 'pglite',
    async start() {
      const server = await startPgliteProcess();
      const bench = await postgresBackend('pglite', 'PGlite (embedded)', server.url, server.label);
      return { bench, stop: server.stop };
    },
  },
  {
    id: 'postgres',
    async start() {
      const found = await findPostgresServer();
      if (found === null) return { missing: 'no PostgreSQL server (set STOWAGE_POSTGRES_URL)' };
      const bench = await postgresBackend('postgres', 'Postgres server', found.url, found.label);
      return { bench, stop: found.stop };
    },
  },
  {
    id: 'mongo',
    async start() {
      const found = await findMongoServer();
      if (found === null) return { missing: 'no MongoDB server (set STOWAGE_MONGO_URL)' };
      const bench = await mongoBackend(found.url, found.label);
      return { bench, stop: found.stop };
    },
  },
];

async function runBackend(bench: BackendBench): Promise<BackendReport> {
  const report: BackendReport = {
    id: bench.id,
    title: bench.title,
    label: bench.label,
    driver: bench.driver,
    stowageError: bench.stowageError,
    notes: bench.notes,
    ops: [],
    sections: [],
  };
  const ops = config.skip.has('ops') ? [] : bench.ops;
  for (const op of ops) {
    const started = performance.now();
    await bench.resetData();
    const result = await runOp(bench, op, log);
    report.ops.push(result);
    const stowage = result.impls.find((i) => i.kind === 'stowage');
    const ratios = result.ratios.filter((r) => r.target !== null).map((r) => `÷ ${r.impl} ${formatRatio(r.ratio)}`);
    log(
      `${bench.id} ${op.name}: stowage ${stowage?.opsPerSec ? Math.round(stowage.opsPerSec) : '-'} ops/s, ${ratios.join(', ')}, ` +
        `RT ${stowage?.roundTrips ?? '-'} (${((performance.now() - started) / 1000).toFixed(1)} s)`,
    );
  }
  for (const section of bench.sections) {
    if (config.skip.has(section.id)) continue;
    const started = performance.now();
    log(`${bench.id} ${section.id}: starting`);
    await bench.resetData();
    try {
      report.sections.push(...(await section.run(log)));
    } catch (error) {
      report.sections.push(failedTable(section.id, section.id, error));
    }
    log(`${bench.id} ${section.id}: done (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  }
  return report;
}

async function main(): Promise<void> {
  const started = new Date();
  const startedAt = performance.now();
  log(
    `settings: ${config.quick ? 'BENCH_QUICK, ' : ''}${config.rounds}–${config.maxRounds} round(s), ${config.latencyIterations} sequential calls/round, ` +
      `~${config.throughputMs} ms throughput phases at ${config.concurrency} in flight, pool ${config.poolSize}, anchor tables ${config.anchorRows} rows, ` +
      `listings at ${config.flatRows.join(' and ')} rows, hand-off with ${config.handoffWaiters.join('/')} waiters, ${config.connectionProcesses} processes for connections`,
  );
  const backends: BackendReport[] = [];
  const missing: { id: string; reason: string }[] = [];
  for (const candidate of candidates) {
    if (config.backends !== null && !config.backends.includes(candidate.id)) continue;
    log(`${candidate.id}: starting`);
    let started: Awaited<ReturnType<Candidate['start']>>;
    try {
      started = await candidate.start();
    } catch (error) {
      missing.push({ id: candidate.id, reason: (error as Error).message });
      log(`${candidate.id}: could not start: ${(error as Error).message}`);
      continue;
    }
    if ('missing' in started) {
      missing.push({ id: candidate.id, reason: started.missing });
      continue;
    }
    log(`${candidate.id}: ${started.bench.label}${started.bench.stowageError ? ` (stowage: ${started.bench.stowageError})` : ''}`);
    try {
      backends.push(await runBackend(started.bench));
    } catch (error) {
      backends.push({
        id: started.bench.id,
        title: started.bench.title,
        label: started.bench.label,
        driver: started.bench.driver,
        stowageError: started.bench.stowageError,
        notes: started.bench.notes,
        ops: [],
        sections: [],
        error: (error as Error).stack ?? String(error),
      });
    } finally {
      await started.bench.close().catch((error) => log(`${candidate.id}: close failed: ${(error as Error).message}`));
      await started.stop().catch(() => undefined);
    }
  }

  const { unmet, checked } = collectUnmet(backends);
  const report: BenchReport = {
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    durationSec: Math.round((performance.now() - startedAt) / 1000),
    node: process.versions.node,
    cpus: os.availableParallelism(),
    settings: { ...config, skip: [...config.skip] },
    backends,
    missing,
    unmet,
    checked,
  };

  const out: string[] = [];
  out.push('');
  out.push(
    `stowage bench — ${report.startedAt} — node ${report.node}, ${report.cpus} CPUs, ${report.durationSec} s` +
      `${config.quick ? ' — BENCH_QUICK (noisy)' : ''}`,
  );
  out.push(
    `latency: up to ${config.rounds}×${config.latencyIterations} sequential calls; throughput: ${config.concurrency} in flight, median of the rounds' ratios; ` +
      `stowage÷ = stowage's throughput divided by that row's (the target is on that row); rounds = throughput rounds (${config.rounds}, up to ${config.maxRounds} while a ratio is imprecise); ` +
      `RT = round trips per call (measured/expected)`,
  );
  for (const backend of backends) {
    out.push('');
    out.push(renderBackend(backend));
  }
  out.push('');
  out.push(renderSummary(report));
  console.log(out.join('\n'));

  await mkdir(config.outDir, { recursive: true });
  const jsonPath = path.join(config.outDir, 'results.json');
  const svgPath = path.join(config.outDir, 'chart.svg');
  await writeFile(jsonPath, `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(svgPath, renderChart(report));
  console.log(`\nwrote ${path.resolve(jsonPath)} and ${path.resolve(svgPath)}`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
