import { describeConformance, type ConformanceReport } from '@stowage/core/conformance';
import type { Capabilities } from '@stowage/core';
import { afterAll, describe, expect, it } from 'vitest';
import { MongoLockProvider } from '../src/index.js';
import { mongoAdapter } from './mongo-adapter.js';
import { openTestServer } from './server.js';

/**
 * The core conformance suite, unchanged, against every Mongo server found. On a server that
 * runs the pipeline dialect it runs a second time with the classic dialect forced, so both
 * code paths are exercised wherever a real MongoDB is available.
 */
const server = await openTestServer('stowage_conformance');

if (server === null) {
  describe('mongo conformance', () => {
    it.skip('no MongoDB server: set STOWAGE_MONGO_URL or make Docker available', () => {});
  });
} else {
  const probe = await new MongoLockProvider({ url: server.url, database: server.database, collection: 'probe_locks' }).connect();
  const capabilities: Capabilities = probe.capabilities;
  const dialect = probe.dialect;
  await probe.close();
  console.log(`[stowage mongo tests] dialect ${dialect}; capabilities ${JSON.stringify(capabilities)}`);

  const reports: ConformanceReport[] = [describeConformance(mongoAdapter(server))];
  if (dialect === 'pipeline') reports.push(describeConformance(mongoAdapter(server, 'classic')));

  afterAll(async () => {
    await server.close();
    // A case may be skipped only for a capability this server really lacks.
    const missing = (Object.keys(capabilities) as (keyof Capabilities)[]).filter((name) => !capabilities[name]);
    for (const report of reports) {
      for (const skipped of report.skipped) {
        expect(skipped.reason, `${skipped.contract} › ${skipped.case}`).toMatch(new RegExp(`^needs (${missing.join('|')})(, (${missing.join('|')}))*$`));
      }
    }
  });
}
