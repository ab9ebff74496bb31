/**
 * `pnpm start`: OpenTelemetry spans and metrics of stowage stores, printed to the console.
 * Runs the workload in memory, then on DATABASE_URL when set, otherwise on an embedded
 * PostgreSQL (PGlite).
 */
import { connectExampleDatabase } from '@stowage/test-env';
import { memoryStores, postgresStores, printMetrics, printSpans, runOn } from './demo.ts';
import { startTelemetry } from './telemetry.ts';

console.log('stowage example: OpenTelemetry spans and metrics (@stowage/core/telemetry)');
const telemetry = startTelemetry();
const database = await connectExampleDatabase();
console.log(`database: ${database.label}`);
try {
  await runOn(memoryStores());
  await runOn(await postgresStores(database.url));
  console.log('');
  console.log(`spans (${telemetry.spans().length}):`);
  printSpans(telemetry.spans(), console.log);
  console.log('');
  console.log('metrics:');
  printMetrics(await telemetry.metrics(), console.log);
} finally {
  await telemetry.shutdown();
  await database.stop();
}
