import { describeProcess, expectCrashScenarioInvariants, runProcessCrashScenario } from '@stowage/core/conformance';
import { afterAll, describe, expect, it } from 'vitest';
import { MongoProcessBackend } from '../src/index.js';
import { openTestServer } from './server.js';
import { dropProcessCollections, mongoProcessAdapter, processCollections, spawnProcessWorker } from './state-machine-support.js';

/**
 * The state machine on the Mongo server found (STOWAGE_MONGO_URL, else a mongo:8 replica set
 * in a testcontainer): change-stream feeds on replica sets, the polling feed elsewhere
 * (FerretDB). Cases that need exclusive claims are gated on `atomicUpdates`.
 */
const server = await openTestServer('stowage_state_machine');

if (server === null) {
  describe('mongo state machine', () => {
    it.skip('no MongoDB server: set STOWAGE_MONGO_URL or make Docker available', () => {});
  });
} else {
  const probe = await new MongoProcessBackend({ url: server.url, database: server.database, collection: 'probe_process' }).connect();
  const capabilities = probe.capabilities;
  await probe.close();
  console.log(`[stowage mongo tests] process backend capabilities ${JSON.stringify(capabilities)}`);
  afterAll(() => server.close());

  const report = describeProcess(mongoProcessAdapter(server));

  it('skips process cases only for capabilities this server lacks', () => {
    for (const skipped of report.skipped) {
      expect(skipped.reason, skipped.case).toMatch(/^needs atomicUpdates$|^the feed is not durable/);
      if (skipped.reason === 'needs atomicUpdates') expect(capabilities.atomicUpdates).toBe(false);
      else expect(capabilities.changeFeed).toBe(false);
    }
  });

  it(`${server.label}: a worker process SIGKILLed mid-item loses nothing (multi-process crash test)`, { timeout: 240_000 }, async () => {
    const collections = processCollections();
    const backend = await new MongoProcessBackend({ url: server.url, database: server.database, collection: collections.process }).connect();
    try {
      const result = await runProcessCrashScenario({
        backend,
        spawnWorker: (name) => spawnProcessWorker(server, collections, name),
        items: 40,
        workers: 3,
        kills: 2,
        log: (message) => console.log(`[crash test, ${server.label}] ${message}`),
      });
      console.log(`[crash test, ${server.label}] ${JSON.stringify(result)}`);
      expectCrashScenarioInvariants(result);
    } finally {
      await backend.close();
      await dropProcessCollections(server, collections);
    }
  });
}
