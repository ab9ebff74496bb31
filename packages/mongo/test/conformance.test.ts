import { describeConformance, type ConformanceReport } from '@stowage/core/conformance';
import type { Capabilities } from '@stowage/core';
import { afterAll, expect } from 'vitest';
import { MongoLockProvider } from '../src/index.js';
import { mongoAdapter, type MongoAdapterVariant, whenReady } from './mongo-adapter.js';
import { openTestServers } from './server.js';

/**
 * The core conformance suite, unchanged, against every Mongo server found (every contract,
 * processes included: change-stream feeds where the server has change streams, the polling
 * feed elsewhere), three ways:
 *
 * - as detected;
 * - on a server that runs the pipeline dialect, a second time with the classic dialect forced,
 *   so both code paths are exercised wherever a real MongoDB is available;
 * - with a client on the Stable API (`serverApi: { version: '1', strict: true }`, the Atlas
 *   snippet): detection, schema and every operation use only commands of API V1. This run is
 *   also the application that owns its client: every store of a test shares one, and the
 *   transaction cases begin their transactions on it (`beginTransaction`), where the server has
 *   transactions;
 * - on a replica set, twice more as such an application whose client reads `secondaryPreferred`
 *   and `nearest` (switched once connected: see `switchReadPreference`).
 *
 * After the run, every skipped case is printed with its reason, and a case may be skipped only
 * for a capability this server really lacks.
 */
const servers = await openTestServers('stowage_conformance');
/**
 * FerretDB 1.x is recognised (as a server whose updates are not atomic) only through
 * `buildInfo`, which a strict Stable API client never sends: there the suite runs with the
 * Stable API not strict (every command still carries `apiVersion: '1'`). Which commands a
 * strict client sends is checked on every server by stable-api.test.ts.
 */
const stableApi = (product: string): MongoAdapterVariant =>
  product === 'ferretdb'
    ? { name: 'Stable API v1, shared client', clientOptions: { serverApi: { version: '1' } }, sharedClient: true }
    : { name: 'Stable API v1 strict, shared client', clientOptions: { serverApi: { version: '1', strict: true } }, sharedClient: true };

const runs: { server: string; capabilities: Capabilities; report: ConformanceReport; transactions: boolean }[] = [];
for (const server of servers) {
  const probe = await whenReady(new MongoLockProvider({ url: server.url, database: server.database, collection: 'probe_locks' }));
  const capabilities: Capabilities = probe.capabilities;
  const dialect = probe.dialect;
  await probe.close();
  console.log(`[stowage mongo tests] ${server.description}: dialect ${dialect}; capabilities ${JSON.stringify(capabilities)}`);
  runs.push({ server: server.label, capabilities, report: describeConformance(mongoAdapter(server)), transactions: false });
  if (dialect === 'pipeline') runs.push({ server: server.label, capabilities, report: describeConformance(mongoAdapter(server, 'classic')), transactions: false });
  runs.push({ server: server.label, capabilities, report: describeConformance(mongoAdapter(server, 'auto', stableApi(server.product))), transactions: true });
  // Read-heavy services set secondaryPreferred or nearest (often in the URL): stowage's reads, transactions included, still go to the primary.
  if (server.description.includes('replica set')) {
    for (const readPreference of ['secondaryPreferred', 'nearest'] as const) {
      const variant = { name: `read preference ${readPreference}, shared client`, clientOptions: {}, sharedClient: true, readPreference };
      runs.push({ server: server.label, capabilities, report: describeConformance(mongoAdapter(server, 'auto', variant)), transactions: true });
    }
  }
}

afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()));
  for (const { server, capabilities, report, transactions } of runs) {
    const missing = (Object.keys(capabilities) as (keyof Capabilities)[]).filter((name) => !capabilities[name]);
    for (const skipped of report.skipped) {
      console.log(`[stowage mongo conformance] ${server}: skipped ${skipped.contract} › ${skipped.case}: ${skipped.reason}`);
      // A polling feed, without change streams, has no positions to resume from.
      const allowed = [`^needs (${missing.join('|')})(, (${missing.join('|')}))*$`];
      if (!capabilities.changeFeed) allowed.push('^the feed is not durable');
      // Only the shared-client run begins transactions: a session is sent only with its own client.
      if (!transactions) allowed.push('^the adapter has no beginTransaction\\(\\) factory$');
      expect(skipped.reason, `${server}: ${skipped.contract} › ${skipped.case}`).toMatch(new RegExp(allowed.join('|')));
    }
  }
});
