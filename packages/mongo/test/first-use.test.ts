import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { indexSpecs } from '../src/index.js';
import { uniqueName } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

const servers = await openTestServers('stowage_first_use');

const PROCESSES = 6;

describeEachServer(servers, 'concurrent first use', (s) => {

  it(`${PROCESSES} OS processes creating the same collections and indexes at once all succeed`, async () => {
    const stem = uniqueName('first');
    const child = new URL('./fixtures/first-use-child.ts', import.meta.url).pathname;
    const hooks = new URL('./fixtures/ts-source-hooks.mjs', import.meta.url).pathname;
    const runs = await Promise.all(
      Array.from({ length: PROCESSES }, (_, index) =>
        promisify(execFile)(process.execPath, ['--import', hooks, child, s.url, s.database, stem, String(index)], {
          timeout: 120_000,
        }).then(
          ({ stdout }) => JSON.parse(stdout.trim().split('\n').at(-1)!) as { ok: boolean; value?: string; fence?: number },
          (error: { stdout?: string; stderr?: string }) => ({ ok: false, error: `${error.stdout ?? ''}${error.stderr ?? ''}` }),
        ),
      ),
    );
    expect(runs).toEqual(runs.map((_, index) => expect.objectContaining({ ok: true, value: `value-${index}`, fence: 1 })));

    const db = s.admin.db(s.database);
    const specs = indexSpecs({
      kv: `${stem}_kv`,
      locks: `${stem}_locks`,
      cache: `${stem}_cache`,
      checkpoints: `${stem}_checkpoints`,
    }).filter((spec) => spec.collection.startsWith(stem));
    for (const spec of specs) {
      const indexes = await db.collection(spec.collection).listIndexes().toArray();
      const names = indexes.map((index) => index.name as string).sort();
      // Every index exactly once. A server without TTL indexes gets a plain expiresAt index instead.
      const expected = ['_id_', ...spec.indexes.map((index) => (index.expireAfterSeconds === undefined ? index.name : null))]
        .filter((name): name is string => name !== null);
      for (const name of expected) expect(names.filter((existing) => existing === name), `${spec.collection} ${name}`).toHaveLength(1);
      if (spec.indexes.some((index) => index.expireAfterSeconds !== undefined)) {
        expect(indexes.filter((index) => JSON.stringify(index.key) === '{"expiresAt":1}'), spec.collection).toHaveLength(1);
      }
    }
    expect(await db.collection(`${stem}_kv`).countDocuments()).toBe(PROCESSES);
    expect(await db.collection(`${stem}_checkpoints`).countDocuments()).toBe(PROCESSES);
  });
});
