import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { MongoKeyValueStore } from '../src/index.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers, type OpenedTestServer } from './server.js';

/**
 * Several OS processes on one collection at once (issue 6's concurrency figures). Every number
 * is asserted exactly: lost increments 0, one winner per key, fences all distinct.
 */
const servers = await openTestServers('stowage_processes');

const PROCESSES = 6;

/** Whether the server runs an update as one atomic step (`capabilities.atomicUpdates`), as a store on it reports. */
async function atomicUpdates(s: OpenedTestServer): Promise<boolean> {
  const probe = await whenReady(new MongoKeyValueStore({ url: s.url, database: s.database, collection: uniqueName('probe') }));
  const atomic = probe.capabilities.atomicUpdates !== false;
  await probe.close();
  return atomic;
}

async function runChildren<T>(s: OpenedTestServer, mode: string, collection: string, count: number): Promise<T[]> {
  const child = new URL('./fixtures/contention-child.ts', import.meta.url).pathname;
  const hooks = new URL('./fixtures/ts-source-hooks.mjs', import.meta.url).pathname;
  return Promise.all(
    Array.from({ length: PROCESSES }, async () => {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ['--import', hooks, child, s.url, s.database, collection, mode, String(count)],
        { timeout: 240_000 },
      );
      return JSON.parse(stdout.trim().split('\n').at(-1)!) as T;
    }),
  );
}

describeEachServer(servers, `${PROCESSES} OS processes at once`, (s) => {
  it('circuit breaker: no recordFailure increment is lost and exactly one caller sees the count that opens the circuit', async (context) => {
    if (!(await atomicUpdates(s))) return context.skip('needs atomicUpdates: this server runs updates as a read and a separate write (FerretDB 1.x)');
    const perProcess = 25;
    const results = await runChildren<{ counts: number[] }>(s, 'recordFailure', uniqueName('circuit'), perProcess);
    const counts = results.flatMap((result) => result.counts).sort((a, b) => a - b);
    const total = PROCESSES * perProcess;
    console.log(`[stowage mongo] recordFailure: ${PROCESSES} processes x ${perProcess} = ${total} failures, lost increments ${total - new Set(counts).size}`);
    expect(counts).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(counts.filter((count) => count === 50)).toHaveLength(1);
  });

  it('idempotency: of the processes reserving the same 40 new keys, exactly one acquires each key', async () => {
    const keys = 40;
    const results = await runChildren<{ acquired: string[] }>(s, 'reserve', uniqueName('idempotency'), keys);
    const acquired = results.flatMap((result) => result.acquired).sort();
    console.log(`[stowage mongo] reserve: ${PROCESSES} processes x ${keys} keys, acquisitions ${acquired.length} (expected ${keys})`);
    expect(acquired).toEqual(Array.from({ length: keys }, (_, i) => `op-${i}`).sort());
  });

  it('locks: processes taking turns on one lock (waiting, woken or polling) all get distinct fences', async (context) => {
    if (!(await atomicUpdates(s))) return context.skip('needs atomicUpdates: a free lease can be taken twice where updates are not atomic (FerretDB 1.x)');
    const perProcess = 10;
    const results = await runChildren<{ fences: number[] }>(s, 'acquire', uniqueName('locks'), perProcess);
    const fences = results.flatMap((result) => result.fences);
    console.log(`[stowage mongo] acquire: ${PROCESSES} processes x ${perProcess} turns, distinct fences ${new Set(fences).size}`);
    expect(new Set(fences).size).toBe(PROCESSES * perProcess);
    expect([...fences].sort((a, b) => a - b)).toEqual(Array.from({ length: PROCESSES * perProcess }, (_, i) => i + 1));
  });
});
