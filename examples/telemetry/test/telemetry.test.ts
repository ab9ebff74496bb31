/**
 * The spans and metrics OpenTelemetry exports for the example's short run, in memory, on a
 * PostgreSQL server (STOWAGE_POSTGRES_URL; under CI=true a missing server fails the run) and on
 * MongoDB (jongodb, started for the test), and `pnpm start` on the embedded PostgreSQL it uses
 * by default.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { DataPoint, Histogram, MetricData } from '@opentelemetry/sdk-metrics';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { PostgresKeyValueStore } from '@stowage/postgres';
import { findPostgresServer, startJongodb, type FoundBackend } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { memoryStores, mongoStores, postgresStores, runOn } from '../src/demo.ts';
import { startTelemetry, type Telemetry } from '../src/telemetry.ts';
import { SECRET_KEY_PART, SECRET_VALUE_PART } from '../src/workload.ts';

/** The calls of one run of the workload, by operation. */
const CALLS = {
  'kv.set': 3,
  'kv.get': 2,
  'kv.getMany': 1,
  'kv.compareAndSet': 1,
  'cache.get': 2,
  'cache.set': 1,
  'cache.getOrSet': 1,
  'locks.acquire': 2,
  'locks.release': 3, // two handles, and withLock's own
  'locks.extend': 1,
  'locks.withLock': 1,
  'process.createItem': 1,
  'process.claim': 1,
  'process.transition': 1,
};

let telemetry: Telemetry | undefined;
afterEach(async () => {
  await telemetry?.shutdown();
  telemetry = undefined;
});

function countBy<T>(items: readonly T[], keyOf: (item: T) => string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const item of items) counts[keyOf(item)] = (counts[keyOf(item)] ?? 0) + 1;
  return counts;
}

/** The data points of metric `name` for one database system. */
function pointsOf<T = number>(metrics: readonly MetricData[], name: string, system: string): DataPoint<T>[] {
  const metric = metrics.find((candidate) => candidate.descriptor.name === name);
  return ((metric?.dataPoints ?? []) as DataPoint<T>[]).filter((point) => point.attributes['db.system.name'] === system);
}

function valueWhere(points: readonly DataPoint<number>[], attributes: Record<string, unknown>): number[] {
  return points.filter((point) => Object.entries(attributes).every(([key, value]) => point.attributes[key] === value)).map((point) => point.value);
}

interface Expected {
  system: string;
  kind: SpanKind;
  /** Table (or collection) by contract; `undefined` in memory. */
  collections: Record<'kv' | 'cache' | 'locks' | 'process', string | undefined>;
  /** The database and server of the URL the stores were opened on (`db.namespace`, `server.*`). */
  server?: { namespace: string; address: string; port: number };
  wakeups: number;
}

/** What a store reports of `url`: its database (or `database`), first host and port. */
function serverOf(url: string, database?: string): Expected['server'] {
  const parsed = new URL(url);
  return { namespace: database ?? decodeURIComponent(parsed.pathname.slice(1)), address: parsed.hostname, port: Number(parsed.port) };
}

function operationOf(span: ReadableSpan): string {
  return span.attributes['db.operation.name'] as string;
}

function checkSpans(all: readonly ReadableSpan[], expected: Expected): void {
  const spans = all.filter((span) => span.attributes['db.system.name'] === expected.system);
  expect(countBy(spans, operationOf)).toEqual(CALLS);
  for (const span of spans) {
    const operation = operationOf(span);
    const contract = operation.split('.')[0] as keyof Expected['collections'];
    const collection = expected.collections[contract];
    expect(span.kind).toBe(expected.kind);
    // The semantic conventions' database span name: "{db.operation.name} {db.collection.name}".
    expect(span.name).toBe(collection === undefined ? operation : `${operation} ${collection}`);
    expect(span.attributes['db.collection.name']).toBe(collection);
    if (expected.server !== undefined) {
      expect(span.attributes['db.namespace']).toBe(expected.server.namespace);
      expect([span.attributes['server.address'], span.attributes['server.port']]).toEqual([expected.server.address, expected.server.port]);
    }
    expect(span.attributes).not.toHaveProperty('db.system'); // deprecated: db.system.name only
    expect(span.attributes['stowage.store']).toMatch(/^(Memory|Postgres|Mongo)[A-Za-z]+$/);
    expect(span.attributes).not.toHaveProperty('stowage.key'); // keys only when asked for (includeKeys)
    expect(span.ended).toBe(true);
  }
  expect(spans.find((span) => operationOf(span) === 'kv.getMany')!.attributes['db.operation.batch.size']).toBe(3);
  // The compare-and-set that lost says so (error.type) but is an expected outcome, not an error span.
  expect(spans.filter((span) => span.status.code === SpanStatusCode.ERROR)).toEqual([]);
  const conflicted = spans.filter((span) => span.attributes['error.type'] !== undefined);
  expect(conflicted.map((span) => [operationOf(span), span.attributes['error.type'], span.status.code])).toEqual([
    ['kv.compareAndSet', 'E_VERSION_CONFLICT', SpanStatusCode.UNSET],
  ]);
  // The function withLock runs is inside its span: the kv.get it does is the span's child.
  const withLock = spans.find((span) => operationOf(span) === 'locks.withLock')!;
  const children = spans.filter((span) => span.parentSpanContext?.spanId === withLock.spanContext().spanId);
  expect(children.map(operationOf).sort()).toEqual(['kv.get', 'locks.release']);
}

function checkMetrics(metrics: readonly MetricData[], spans: readonly ReadableSpan[], expected: Expected): void {
  const { system } = expected;
  // One duration per call: the histogram's counts by operation are the spans' counts.
  const durations = pointsOf<Histogram>(metrics, 'stowage.operation.duration', system);
  const counted: Record<string, number> = {};
  for (const point of durations) counted[point.attributes['db.operation.name'] as string] = (counted[point.attributes['db.operation.name'] as string] ?? 0) + point.value.count;
  expect(counted).toEqual(countBy(spans.filter((span) => span.attributes['db.system.name'] === system), operationOf));
  expect(durations.find((point) => point.attributes['error.type'] !== undefined)?.attributes).toMatchObject({
    'db.operation.name': 'kv.compareAndSet',
    'error.type': 'E_VERSION_CONFLICT',
  });

  const errors = pointsOf(metrics, 'stowage.operation.errors', system);
  expect(errors.map((point) => [point.attributes['db.operation.name'], point.attributes['error.type'], point.value])).toEqual([
    ['kv.compareAndSet', 'E_VERSION_CONFLICT', 1],
  ]);
  expect(valueWhere(pointsOf(metrics, 'stowage.cache.hits', system), {})).toEqual([1]);
  expect(valueWhere(pointsOf(metrics, 'stowage.cache.misses', system), {})).toEqual([2]);

  // The holder's acquisition, the waiter's, and withLock's: all granted.
  const waits = pointsOf<Histogram>(metrics, 'stowage.lock.wait.duration', system);
  expect(waits.map((point) => [point.attributes['stowage.lock.acquired'], point.value.count])).toEqual([[true, 3]]);
  expect(waits[0]!.attributes['db.collection.name']).toBe(expected.collections.locks);
  expect(valueWhere(pointsOf(metrics, 'stowage.lock.wakeups', system), {})).toEqual(expected.wakeups > 0 ? [expected.wakeups] : []);
  expect(valueWhere(pointsOf(metrics, 'stowage.lease.lost', system), { 'db.operation.name': 'locks.extend' })).toEqual([1]);

  // The three concurrent sets went out as one statement.
  const sets = pointsOf<Histogram>(metrics, 'stowage.batch.size', system).find((point) => point.attributes['db.operation.name'] === 'kv.set')!;
  expect([sets.value.count, sets.value.max]).toEqual([1, 3]);

  const lag = pointsOf<Histogram>(metrics, 'stowage.process.lag', system);
  expect(lag.map((point) => [point.attributes['stowage.process.name'], point.attributes['stowage.process.state'], point.value.count])).toEqual([
    ['orders', 'new', 1],
  ]);
  expect(lag[0]!.value.min).toBeGreaterThanOrEqual(0);
  const transitions = pointsOf(metrics, 'stowage.process.transitions', system);
  expect(transitions.map((point) => [point.attributes['stowage.process.transition'], point.attributes['stowage.process.state'], point.value])).toEqual([
    ['create', 'new', 1],
    ['advance', 'paid', 1],
  ]);
  const items = pointsOf(metrics, 'stowage.process.items', system);
  expect(Object.fromEntries(items.map((point) => [point.attributes['stowage.process.state'], point.value]))).toEqual({ new: 0, paid: 1 });
}

/** Nothing the workload wrote (keys, values) appears in any exported span or metric. */
function checkNothingLeaks(spans: readonly ReadableSpan[], metrics: readonly MetricData[]): void {
  const exported = JSON.stringify([
    spans.map((span) => [span.name, span.attributes, span.events, span.status, span.links]),
    metrics.map((metric) => metric.dataPoints.map((point) => point.attributes)),
  ]);
  expect(exported).toContain('kv.getMany'); // the text is what was exported
  expect(exported).not.toContain(SECRET_KEY_PART);
  expect(exported).not.toContain(SECRET_VALUE_PART);
}

describe('the run in memory', () => {
  it('exports one span per call and the metrics of the run, without keys or values', async () => {
    telemetry = startTelemetry();
    await runOn(memoryStores());
    const spans = telemetry.spans();
    const metrics = await telemetry.metrics();
    const expected: Expected = {
      system: 'memory',
      kind: SpanKind.INTERNAL,
      collections: { kv: undefined, cache: undefined, locks: undefined, process: undefined },
      wakeups: 1, // the holder's release hands the lock to the waiter in line (src/workload.ts)
    };
    checkSpans(spans, expected);
    checkMetrics(metrics, spans, expected);
    checkNothingLeaks(spans, metrics);
  });

  it('puts keys on spans only when includeKeys is set', async () => {
    telemetry = startTelemetry({ includeKeys: true });
    await runOn(memoryStores());
    const gets = telemetry.spans().filter((span) => operationOf(span) === 'kv.get');
    expect(gets).toHaveLength(2);
    for (const span of gets) expect(span.attributes['stowage.key']).toMatch(new RegExp(`:(a|b):${SECRET_KEY_PART}$`));
    expect(telemetry.spans().find((span) => operationOf(span) === 'kv.getMany')!.attributes).not.toHaveProperty('stowage.key');
  });
});

describe('the run on a PostgreSQL server', () => {
  let server: FoundBackend | null;

  beforeAll(async () => {
    server = await findPostgresServer(); // null outside CI when none is configured
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('exports one span per call and the metrics of the run, without keys or values', async (context) => {
    if (server === null) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    telemetry = startTelemetry();
    const stores = await postgresStores(server.url);
    await runOn(stores);
    const spans = telemetry.spans();
    const metrics = await telemetry.metrics();
    const expected: Expected = {
      system: 'postgresql',
      kind: SpanKind.CLIENT,
      collections: { kv: 'awaitly_workflow_state', cache: 'stowage_cache', locks: 'stowage_locks', process: 'stowage_process_items' },
      server: serverOf(server.url),
      wakeups: 1, // the holder's release hands the lock to the waiter in line, long before its 60 s poll
    };
    checkSpans(spans, expected);
    checkMetrics(metrics, spans, expected);
    checkNothingLeaks(spans, metrics);
  });

  it("a failure the server explains is an error span with the server's SQLSTATE as db.response.status_code", async (context) => {
    if (server === null) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    telemetry = startTelemetry();
    const pool = new pg.Pool({ connectionString: server.url, max: 1 });
    const kv = new PostgresKeyValueStore({ pool, table: `telemetry_missing_${process.pid}`, autoCreate: false });
    try {
      await expect(kv.set('k', 'v')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', cause: { code: '42P01' } });
    } finally {
      await kv.close();
      await pool.end();
    }
    const failed = telemetry.spans().filter((span) => span.attributes['error.type'] !== undefined);
    expect(failed.map((span) => [span.attributes['error.type'], span.attributes['db.response.status_code'], span.status.code])).toContainEqual([
      'E_INVALID_OPTION',
      '42P01',
      SpanStatusCode.ERROR,
    ]);
  });
});

describe('the run on MongoDB (jongodb)', () => {
  let server: FoundBackend;

  beforeAll(async () => {
    server = await startJongodb();
  });
  afterAll(async () => {
    await server.stop();
  });

  it('exports one span per call and the metrics of the run, without keys or values', async () => {
    telemetry = startTelemetry();
    await runOn(mongoStores(server.url, `telemetry_${process.pid}`));
    const spans = telemetry.spans();
    const metrics = await telemetry.metrics();
    const expected: Expected = {
      system: 'mongodb',
      kind: SpanKind.CLIENT,
      collections: { kv: 'workflow_state', cache: 'stowage_cache', locks: 'stowage_locks', process: 'stowage_process' },
      server: serverOf(server.url, `telemetry_${process.pid}`),
      wakeups: 1, // the holder's release hands the lock to the waiter in line
    };
    checkSpans(spans, expected);
    checkMetrics(metrics, spans, expected);
    checkNothingLeaks(spans, metrics);
  });
});

describe('pnpm start with no database configured', () => {
  it('prints the spans and metrics of both runs, on embedded PGlite', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [main], { env });
    expect(stdout).toContain('database: embedded PGlite');
    expect(stdout).toMatch(/spans \(\d+\):/);
    expect(stdout).toMatch(/memory +kv\.getMany .* batch of 3/);
    expect(stdout).toMatch(/postgresql +kv\.compareAndSet .* failed: E_VERSION_CONFLICT/);
    for (const metric of ['stowage.operation.duration', 'stowage.operation.errors', 'stowage.cache.hits', 'stowage.lock.wait.duration']) {
      expect(stdout).toContain(`  ${metric} (`);
    }
    expect(stdout).not.toContain(SECRET_KEY_PART);
  });
});
