import { MongoClient, type CommandStartedEvent, type Document } from 'mongodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MongoCacheProvider,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
} from '../src/index.js';
import { uniqueName } from './mongo-adapter.js';
import { openTestServer } from './server.js';

/**
 * The pipeline dialect runs only on a real MongoDB, which CI does not have. These checks look at
 * the commands it sends (forced with `dialect: 'pipeline'`, whatever the server then answers) for
 * two rules the server enforces or security needs:
 *
 * - MongoDB refuses `$expr` in the filter of an upsert (error 224), so no upsert may carry one;
 * - a caller's string inside an aggregation expression must be wrapped in `$literal`, or `'$x'`
 *   would read field x and `'$$NOW'` the clock.
 */
const server = await openTestServer('stowage_pipeline_commands');
afterAll(() => server?.close());

const HOSTILE = { value: '$hostile.value', owner: '$hostile.owner', key: '$$NOW' };

function containsKey(value: unknown, key: string): boolean {
  if (Array.isArray(value)) return value.some((item) => containsKey(item, key));
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).some(([name, item]) => name === key || containsKey(item, key));
  }
  return false;
}

/** Paths in `value` where one of `needles` appears outside `{ $literal: … }`. */
function unwrapped(value: unknown, needles: string[], path = ''): string[] {
  if (typeof value === 'string') return needles.includes(value) ? [path] : [];
  if (Array.isArray(value)) return value.flatMap((item, index) => unwrapped(item, needles, `${path}[${index}]`));
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([name, item]) => (name === '$literal' ? [] : unwrapped(item, needles, `${path}.${name}`)));
  }
  return [];
}

describe.skipIf(server === null)('commands of the pipeline dialect', () => {
  const s = server!;
  let client: MongoClient;
  const commands: CommandStartedEvent[] = [];

  beforeAll(async () => {
    client = await new MongoClient(s.url, { monitorCommands: true }).connect();
    client.on('commandStarted', (event) => commands.push(event));
  });
  afterAll(() => client?.close());

  it('never put $expr in an upsert filter, and wrap every caller string inside a pipeline in $literal', async () => {
    const options = (stem: string) => ({ client, database: s.database, collection: uniqueName(stem), dialect: 'pipeline' as const });
    const kv = await new MongoKeyValueStore(options('pc_kv')).connect();
    const locks = await new MongoLockProvider(options('pc_locks')).connect();
    const cache = await new MongoCacheProvider(options('pc_cache')).connect();
    const breaker = await new MongoCircuitBreakerStore(options('pc_circuit')).connect();
    const idempotency = await new MongoIdempotencyStore(options('pc_idempotency')).connect();
    commands.splice(0);
    const attempts: (() => Promise<unknown>)[] = [
      () => kv.set(HOSTILE.key, HOSTILE.value, { ttl: 60_000 }),
      () => kv.set(HOSTILE.key, HOSTILE.value),
      () => kv.setMany([{ key: HOSTILE.key, value: HOSTILE.value, ttl: 1_000 }, { key: 'b', value: HOSTILE.value }]),
      () => kv.compareAndSet(HOSTILE.key, HOSTILE.value, null, { ttl: 1_000 }),
      () => kv.compareAndSet(HOSTILE.key, HOSTILE.value, 3),
      () => kv.get(HOSTILE.key),
      () => kv.keys('$*'),
      () => kv.getMany([HOSTILE.key]),
      () => kv.delete(HOSTILE.key),
      () => kv.deleteMany([HOSTILE.key]),
      () => kv.clearExpired(),
      () => locks.acquire(HOSTILE.key, 60_000, HOSTILE.owner),
      () => locks.extend(HOSTILE.key, 60_000, HOSTILE.owner),
      () => locks.release(HOSTILE.key, HOSTILE.owner),
      () => locks.forceRelease(HOSTILE.key),
      () => cache.set(HOSTILE.key, HOSTILE.value, 1_000),
      () => cache.get(HOSTILE.key),
      () => breaker.recordFailure(HOSTILE.key, 3, { cooldown: 1_000 }),
      () => breaker.recordFailure(HOSTILE.key, 3),
      () => breaker.getState(HOSTILE.key),
      () => idempotency.reserve(HOSTILE.key, 1_000),
      () => idempotency.set(HOSTILE.key, HOSTILE.value, 1_000),
      () => idempotency.complete(HOSTILE.key, HOSTILE.owner, HOSTILE.value),
    ];
    for (const attempt of attempts) await attempt().catch(() => undefined); // a server without pipelines refuses them
    await Promise.all([kv, locks, cache, breaker, idempotency].map((store) => store.close()));

    const writes = commands.filter((event) => event.commandName === 'update' || event.commandName === 'findAndModify');
    expect(writes.length).toBeGreaterThan(10);
    const pipelines: Document[][] = [];
    for (const { command, commandName } of writes) {
      const statements: Document[] =
        commandName === 'update'
          ? (command.updates as Document[])
          : [{ q: command.query, u: command.update, upsert: command.upsert }];
      for (const statement of statements) {
        if (statement.upsert) expect(containsKey(statement.q, '$expr'), JSON.stringify(statement.q)).toBe(false);
        if (Array.isArray(statement.u)) pipelines.push(statement.u as Document[]);
      }
    }
    expect(pipelines.length).toBeGreaterThan(10);
    for (const pipeline of pipelines) {
      expect(unwrapped(pipeline, [HOSTILE.value, HOSTILE.owner, JSON.stringify(HOSTILE.value)]), JSON.stringify(pipeline)).toEqual([]);
    }
  });
});
