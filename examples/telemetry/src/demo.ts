/**
 * The workload on the in-memory adapter, on PostgreSQL and on MongoDB, with OpenTelemetry recording it,
 * and a compact print-out of the spans and metrics that were exported.
 */
import { randomUUID } from 'node:crypto';
import type { MetricData } from '@opentelemetry/sdk-metrics';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { MemoryCacheProvider, MemoryKeyValueStore, MemoryLockProvider, MemoryProcessBackend } from '@stowage/core/memory';
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, MongoProcessBackend } from '@stowage/mongo';
import { PostgresCacheProvider, PostgresKeyValueStore, PostgresLockProvider, PostgresProcessBackend } from '@stowage/postgres';
import { runWorkload, type Stores } from './workload.ts';

export function memoryStores(): Stores {
  return { kv: new MemoryKeyValueStore(), cache: new MemoryCacheProvider(), locks: new MemoryLockProvider(), processes: new MemoryProcessBackend() };
}

export async function postgresStores(url: string): Promise<Stores> {
  return { kv: new PostgresKeyValueStore({ url }), cache: new PostgresCacheProvider({ url }), locks: new PostgresLockProvider({ url }), processes: new PostgresProcessBackend({ url }) };
}

export function mongoStores(url: string, database: string): Stores {
  const options = { url, database };
  return { kv: new MongoKeyValueStore(options), cache: new MongoCacheProvider(options), locks: new MongoLockProvider(options), processes: new MongoProcessBackend(options) };
}

/** Runs the workload on `stores` under a fresh run id, then closes them. */
export async function runOn(stores: Stores): Promise<void> {
  try {
    await runWorkload(stores, randomUUID().slice(0, 8));
  } finally {
    await Promise.all(Object.values(stores).map((store) => store.close()));
  }
}

export function printSpans(spans: readonly ReadableSpan[], log: (line: string) => void): void {
  for (const span of spans) {
    const ms = (span.duration[0] * 1e3 + span.duration[1] / 1e6).toFixed(2);
    const { 'db.system.name': system, 'db.collection.name': collection, 'db.operation.batch.size': batch, 'error.type': error } = span.attributes;
    const details = [collection && `on ${String(collection)}`, batch !== undefined && `batch of ${String(batch)}`, error && `failed: ${String(error)}`]
      .filter(Boolean)
      .join(', ');
    const operation = String(span.attributes['db.operation.name'] ?? span.name); // the span's name adds the collection, printed after
    log(`  ${String(system).padEnd(10)} ${operation.padEnd(20)} ${ms.padStart(7)} ms  ${details}`);
  }
}

export function printMetrics(metrics: readonly MetricData[], log: (line: string) => void): void {
  for (const metric of metrics) {
    log(`  ${metric.descriptor.name} (${metric.descriptor.unit || 'count'})`);
    for (const point of metric.dataPoints) {
      const value = typeof point.value === 'number' ? String(point.value) : `count ${point.value.count}, sum ${point.value.sum?.toFixed(4)}`;
      log(`    ${JSON.stringify(point.attributes)}: ${value}`);
    }
  }
}
