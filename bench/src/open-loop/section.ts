/**
 * The open-loop section: the HTTP service (service.ts) once per implementation, each in its
 * own process with a pool of `config.poolSize`, driven by driver.ts at a ladder of fixed
 * rates, implementations interleaved rate by rate and round by round, medians over rounds.
 * A server sees requests arrive one by one, not callers in lock-step: this is the yardstick
 * for what a service on stowage can hold. Per route and implementation it reports the highest
 * rate held (median p99 ≤ 20 ms and at least 95% of the offered rate answered), and writes a
 * chart of p99 against the offered rate.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { config } from '../config.ts';
import { check, ms } from '../sections.ts';
import { formatInt, median } from '../stats.ts';
import type { Section, SectionRow, SectionTable } from '../types.ts';
import type { DriverConfig, DriverResult } from './driver.ts';
import type { ImplName, ServiceConfig } from './impls.ts';
import { renderOpenLoopChart } from './chart.ts';

const HELD_P99_MS = 20;
/** Past this p99 an implementation is saturated: higher rates of that round are not offered to it. */
const SATURATED_P99_MS = 250;

export interface RouteSpec {
  route: 'get' | 'read' | 'write';
  title: string;
  rates: number[];
}

/** The routes and their ladders of offered rates (requests/s) on a PostgreSQL server. */
export const OPEN_LOOP_ROUTES: RouteSpec[] = [
  { route: 'get', title: 'kv.get', rates: [500, 1_000, 2_000, 3_000, 5_000, 7_000, 10_000, 14_000, 18_000] },
  { route: 'read', title: 'read-through (cache.getOrSet + kv.set)', rates: [250, 500, 1_000, 1_500, 2_000, 3_000, 4_000, 6_000] },
  { route: 'write', title: 'kv.set', rates: [250, 500, 1_000, 1_500, 2_000, 3_000, 4_000, 6_000] },
];

export interface OpenLoopSetup {
  backend: 'postgres' | 'mongo';
  /** `postgres`, `pglite`, `mongo`: names the chart files. */
  id: string;
  url: string;
  namespace: string;
  rows: number;
  impls: ImplName[];
  /** Targets apply on the PostgreSQL server only (this machine's figures in the issue). */
  targets: boolean;
  routes: RouteSpec[];
}

export interface Point {
  impl: ImplName;
  route: string;
  offered: number;
  achieved: number;
  /** ms; Infinity when unanswered requests reach the percentile. */
  p50: number;
  p99: number;
  statementsPerRequest: number;
  cpuMicrosPerRequest: number;
  rounds: number;
}

class Service {
  readonly #child: ChildProcess;
  readonly port: Promise<number>;

  constructor(service: ServiceConfig) {
    const script = fileURLToPath(new URL('./service.ts', import.meta.url));
    this.#child = fork(script, [JSON.stringify(service)], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'], execArgv: [] });
    this.port = new Promise((resolve, reject) => {
      this.#child.stdout!.on('data', (chunk: Buffer) => {
        const match = /listening (\d+)/.exec(chunk.toString());
        if (match) resolve(Number(match[1]));
      });
      this.#child.once('exit', (code) => reject(new Error(`${service.impl} service exited with ${code}`)));
    });
  }

  async stats(): Promise<{ requests: number; statements: number; cpuMicros: number }> {
    const response = await fetch(`http://127.0.0.1:${await this.port}/stats`);
    return (await response.json()) as { requests: number; statements: number; cpuMicros: number };
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode !== null) return;
    this.#child.kill('SIGTERM');
    await once(this.#child, 'exit');
  }
}

async function drive(driver: DriverConfig): Promise<DriverResult> {
  const script = fileURLToPath(new URL('./driver.ts', import.meta.url));
  const child = fork(script, [JSON.stringify(driver)], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'], execArgv: [] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`load driver exited with ${code}`);
  return JSON.parse(output) as DriverResult;
}

const infinite = (value: number | null): number => value ?? Number.POSITIVE_INFINITY;

/** One run at one rate: the driver's latencies and the service's own counts over that window. */
async function measure(service: Service, impl: ImplName, route: string, rate: number, durationMs: number, rows: number) {
  await service.stats(); // resets the service's counters
  const result = await drive({ port: await service.port, route, rate, durationMs, rows });
  const stats = await service.stats();
  const requests = Math.max(1, stats.requests - 1); // the /stats request itself is not counted; keep the division safe
  return {
    impl,
    route,
    offered: rate,
    achieved: result.achieved,
    p50: infinite(result.p50),
    p99: infinite(result.p99),
    statementsPerRequest: stats.statements / requests,
    cpuMicrosPerRequest: stats.cpuMicros / requests,
  };
}

/** The highest offered rate whose median p99 is within the bound with ≥ 95% answered. */
export function heldRate(points: Point[]): number {
  let held = 0;
  for (const point of points) if (point.p99 <= HELD_P99_MS && point.achieved >= 0.95 * point.offered) held = Math.max(held, point.offered);
  return held;
}

export function openLoopSection(setup: OpenLoopSetup): Section {
  return {
    id: 'open-loop',
    async run(log) {
      const durationMs = config.openLoopMs;
      const services = new Map<ImplName, Service>();
      for (const impl of setup.impls) {
        services.set(impl, new Service({ backend: setup.backend, impl, url: setup.url, namespace: setup.namespace, poolSize: config.poolSize, rows: setup.rows }));
      }
      try {
        for (const [impl, service] of services) {
          await service.port;
          // warm-up: connections, prepared statements, JIT
          for (const { route } of setup.routes) await drive({ port: await service.port, route, rate: 500, durationMs: 1_000, rows: setup.rows });
          log(`open-loop ${setup.id}: ${impl} ready`);
        }
        const samples = new Map<string, Omit<Point, 'rounds'>[]>();
        for (let round = 0; round < config.openLoopRounds; round++) {
          for (const { route, rates } of setup.routes) {
            const saturated = new Set<ImplName>();
            for (const rate of rates) {
              // interleaved, and the order turns each round: no implementation always runs first
              const order = setup.impls.map((_, i) => setup.impls[(i + round) % setup.impls.length]!);
              for (const impl of order) {
                if (saturated.has(impl)) continue;
                const point = await measure(services.get(impl)!, impl, route, rate, durationMs, setup.rows);
                const key = `${route}|${impl}|${rate}`;
                samples.set(key, [...(samples.get(key) ?? []), point]);
                if (point.p99 > SATURATED_P99_MS) saturated.add(impl);
                log(`open-loop ${setup.id} round ${round + 1} ${route} ${rate}/s ${impl}: ${Math.round(point.achieved)}/s, p50 ${ms(point.p50)} p99 ${ms(point.p99)} ms`);
              }
            }
          }
        }
        const points = [...samples.values()].map((runs): Point => ({
          ...runs[0]!,
          achieved: median(runs.map((r) => r.achieved)),
          p50: median(runs.map((r) => r.p50)),
          p99: median(runs.map((r) => r.p99)),
          statementsPerRequest: median(runs.map((r) => r.statementsPerRequest)),
          cpuMicrosPerRequest: median(runs.map((r) => r.cpuMicrosPerRequest)),
          rounds: runs.length,
        }));
        await mkdir(config.outDir, { recursive: true });
        const chart = path.join(config.outDir, `open-loop-${setup.id}.svg`);
        await writeFile(chart, renderOpenLoopChart(setup, points, HELD_P99_MS));
        const tables = [...setup.routes.map((route) => routeTable(setup, route, points)), summaryTable(setup, points, chart)];
        if (setup.backend === 'postgres') tables.push(await pastSaturation(setup, points, services.get('stowage')!, log));
        return tables;
      } finally {
        await Promise.all([...services.values()].map((service) => service.stop()));
      }
    },
  };
}

function routeTable(setup: OpenLoopSetup, { route, title }: RouteSpec, points: Point[]): SectionTable {
  const rows: SectionRow[] = points
    .filter((p) => p.route === route)
    .sort((a, b) => a.offered - b.offered || setup.impls.indexOf(a.impl) - setup.impls.indexOf(b.impl))
    .map((p) => ({
      cells: [
        formatInt(p.offered),
        p.impl,
        formatInt(Math.round(p.achieved)),
        ms(p.p50),
        Number.isFinite(p.p99) ? ms(p.p99) : '∞',
        p.statementsPerRequest.toFixed(2),
        p.statementsPerRequest > 0 ? (1 / p.statementsPerRequest).toFixed(2) : '-',
        formatInt(Math.round(p.cpuMicrosPerRequest)),
      ],
      note: p.rounds < config.openLoopRounds ? `${p.rounds} of ${config.openLoopRounds} rounds (saturated below)` : undefined,
      data: { ...p },
    }));
  return {
    id: 'open-loop',
    title: `open loop, ${title} — Poisson arrivals, latency from the scheduled time, ${config.openLoopMs} ms per rate, median of ${config.openLoopRounds} round(s), pool ${config.poolSize}`,
    header: ['offered/s', 'implementation', 'achieved/s', 'p50 ms', 'p99 ms', 'statements/req', 'req/statement', 'service CPU µs/req'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows,
    notes: ['req/statement is the mean batch where requests share statements (1.00: none shared); ∞: requests unanswered or failed'],
  };
}

function summaryTable(setup: OpenLoopSetup, points: Point[], chart: string): SectionTable {
  const held = (route: string, impl: ImplName): number => heldRate(points.filter((p) => p.route === route && p.impl === impl));
  const rows: SectionRow[] = setup.routes.map(({ route, title }) => ({
    cells: [title, ...setup.impls.map((impl) => formatInt(held(route, impl)))],
  }));
  if (setup.targets) {
    // NaN where the other held no rate of the ladder: no ratio to judge (a check of NaN fails).
    const ratio = (route: string, other: ImplName): number => (held(route, other) === 0 ? Number.NaN : held(route, 'stowage') / held(route, other));
    const p50At = (impl: ImplName, rate: number) => points.find((p) => p.route === 'get' && p.impl === impl && p.offered === rate)?.p50 ?? Number.NaN;
    const targets = [
      check('kv.get route: held rate ÷ raw pg, prepared', '≥ 3×', `${ratio('get', 'raw pg, prepared').toFixed(2)}×`, ratio('get', 'raw pg, prepared') >= 3),
      check('kv.get route: held rate ÷ @keyv/postgres', '≥ 3×', `${ratio('get', '@keyv/postgres').toFixed(2)}×`, ratio('get', '@keyv/postgres') >= 3),
      check('read-through route: held rate ÷ raw pg, prepared', '≥ 2×', `${ratio('read', 'raw pg, prepared').toFixed(2)}×`, ratio('read', 'raw pg, prepared') >= 2),
      check(
        'kv.get route at 500/s: p50 stowage vs raw pg, prepared',
        '≤ raw',
        `${ms(p50At('stowage', 500))} vs ${ms(p50At('raw pg, prepared', 500))} ms`,
        p50At('stowage', 500) <= p50At('raw pg, prepared', 500),
      ),
    ];
    for (const target of targets) rows.push({ cells: [target.what, ...setup.impls.map(() => '')], check: target });
  }
  return {
    id: 'open-loop',
    title: `open loop: highest rate held (p99 ≤ ${HELD_P99_MS} ms, ≥ 95% answered), requests/s`,
    header: ['route', ...setup.impls],
    align: ['l', ...setup.impls.map(() => 'r' as const)],
    rows,
    notes: [`chart of p99 against the offered rate: ${chart}`],
  };
}

/**
 * Past saturation, the kv.get route at 1.5× the rate stowage holds: unbounded, every request
 * queues for the pool and all of them wait; with `maxWaiting` (the pool's size), the excess is
 * refused at once (503) and the requests let in keep their latency.
 */
async function pastSaturation(setup: OpenLoopSetup, points: Point[], unbounded: Service, log: (line: string) => void): Promise<SectionTable> {
  const rate = Math.round((1.5 * heldRate(points.filter((p) => p.route === 'get' && p.impl === 'stowage'))) / 100) * 100;
  const title = `open loop, kv.get past saturation (1.5× the rate stowage holds): unbounded queue vs maxWaiting ${config.poolSize}`;
  const header = ['implementation', 'offered/s', 'answered/s', 'refused', 'p99 admitted ms', 'p99 all ms'];
  if (rate === 0) return { id: 'open-loop', title, header, align: [], rows: [], notes: [], error: 'stowage held no rate of the ladder' };
  const bounded = new Service({ backend: 'postgres', impl: 'stowage', url: setup.url, namespace: setup.namespace, poolSize: config.poolSize, rows: setup.rows, maxWaiting: config.poolSize });
  try {
    await drive({ port: await bounded.port, route: 'get', rate: 500, durationMs: 1_000, rows: setup.rows });
    const runs = new Map<string, DriverResult[]>();
    for (let round = 0; round < config.openLoopRounds; round++) {
      for (const [label, service] of [['stowage, unbounded', unbounded], [`stowage, maxWaiting ${config.poolSize}`, bounded]] as const) {
        const result = await drive({ port: await service.port, route: 'get', rate, durationMs: config.openLoopMs, rows: setup.rows });
        runs.set(label, [...(runs.get(label) ?? []), result]);
        log(`open-loop ${setup.id} past saturation ${rate}/s ${label}: ${Math.round(result.achieved)}/s, ${result.refused} refused, p99 admitted ${ms(result.admittedP99)} ms`);
      }
    }
    const rows: SectionRow[] = [...runs].map(([label, results]) => ({
      cells: [
        label,
        formatInt(rate),
        formatInt(Math.round(median(results.map((r) => r.achieved)))),
        `${(100 * median(results.map((r) => r.refused / Math.max(1, r.sent)))).toFixed(1)}%`,
        ms(median(results.map((r) => infinite(r.admittedP99)))),
        ms(median(results.map((r) => infinite(r.p99)))),
      ],
      data: { rate, results },
    }));
    return { id: 'open-loop', title, header, align: ['l', 'r', 'r', 'r', 'r', 'r'], rows, notes: ['p99 all counts refused and unanswered requests as infinitely slow'] };
  } finally {
    await bounded.stop();
  }
}
