import { expectCrashScenarioInvariants, runProcessCrashScenario } from '@stowage/core/conformance/crash';
import { it } from 'vitest';
import { MongoProcessBackend } from '../src/index.js';
import { describeEachServer, openTestServers } from './server.js';
import { dropProcessCollections, processCollections, spawnProcessWorker } from './state-machine-support.js';
import { whenReady } from './mongo-adapter.js';

/**
 * The multi-process crash test of the state machine on the Mongo server found (the process
 * conformance cases run with every other contract in conformance.test.ts): worker processes
 * SIGKILLed in the middle of a handler lose nothing.
 */
const servers = await openTestServers('stowage_state_machine');

describeEachServer(servers, 'mongo state machine', (s) => {

  it(`a worker process SIGKILLed mid-item loses nothing (multi-process crash test)`, { timeout: 240_000 }, async () => {
    const collections = processCollections();
    const backend = await whenReady(new MongoProcessBackend({ url: s.url, database: s.database, collection: collections.process }));
    try {
      const result = await runProcessCrashScenario({
        backend,
        spawnWorker: (name) => spawnProcessWorker(s, collections, name),
        items: 40,
        workers: 3,
        kills: 2,
        log: (message) => console.log(`[crash test, ${s.label}] ${message}`),
      });
      console.log(`[crash test, ${s.label}] ${JSON.stringify(result)}`);
      expectCrashScenarioInvariants(result);
    } finally {
      await backend.close();
      await dropProcessCollections(s, collections);
    }
  });
});
