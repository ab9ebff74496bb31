import type { JsonObject } from '@stowage/core';
import { MeasuredClock } from '@stowage/core/adapter';
import { MongoClient, type CommandStartedEvent, type Document } from 'mongodb';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PipelineDialect } from '../src/dialects/pipeline.js';
import type { ProcessVersionDocument } from '../src/process/documents.js';
import {
  MongoCacheProvider,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  MongoProcessBackend,
  mongo,
} from '../src/index.js';
import { monitoredClient } from './helpers.js';
import { everyStore, uniqueName, whenReady } from './mongo-adapter.js';
import { essentials } from './pipeline-commands.support.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * The pipeline dialect runs only on a real MongoDB, which CI does not have. These tests look
 * at the commands it sends (forced with `dialect: 'pipeline'`, whatever the server then
 * answers: FerretDB refuses update pipelines, so each operation stops after its one command):
 *
 * - the exact command of every operation (filters, updates, pipelines), one each;
 * - two rules the server enforces or safety needs, over every command sent: MongoDB refuses
 *   `$expr` in the filter of an upsert (error 224), and a caller's string inside an
 *   aggregation expression must be wrapped in `$literal`, or `'$x'` would read field x and
 *   `'$$NOW'` the clock.
 */
const servers = await openTestServers('stowage_pipeline_commands');

/** `$expr`: a value document with a value that has not expired. */
const LIVE = { $and: [{ $eq: [{ $type: '$value' }, 'string'] }, { $gt: [{ $ifNull: ['$expiresAt', '+275760-09-13T00:00:00.000Z'] }, '$$NOW'] }] };
/** `$expr`: a lease that has not ended. */
const LEASE_LIVE = { $gt: [{ $ifNull: ['$expiresAt', '1970-01-01T00:00:00.000Z'] }, '$$NOW'] };
/** `max(previous version + 1, this process's candidate)`. */
const NEXT_VERSION = { $max: [{ $add: [{ $ifNull: ['$version', 0] }, 1] }, '<version>'] };
const TOMBSTONE = [{ $set: { expiresAt: '$$NOW', value: '$$REMOVE', ns: '$$REMOVE' } }];
const RELEASE = { $unset: { owner: '', expiresAt: '' } };

describeEachServer(servers, 'commands of the pipeline dialect', (s) => {
  let client: MongoClient;
  let commands: CommandStartedEvent[];
  const options = (stem: string) => ({ client, database: s.database, collection: uniqueName(stem), dialect: 'pipeline' as const });

  beforeAll(async () => {
    ({ client, commands } = await monitoredClient(s));
  });
  afterAll(() => client?.close());

  /** The essentials of the commands `operation` sent (see pipeline-commands.support.ts). */
  async function sent(operation: () => Promise<unknown>): Promise<Document[]> {
    commands.splice(0);
    await operation().catch(() => undefined); // a server without pipelines refuses them
    // Batches run in a transaction where the server has them: its commit (or abort) is not the command looked at.
    return commands.filter((event) => !/^(commit|abort)Transaction$/.test(event.commandName)).map(essentials);
  }

  it('every operation sends exactly this one command', async () => {
    const stores = everyStore({ client, database: s.database, dialect: 'pipeline' });
    await stores.ready();
    const { kv, snapshots, locks, cache, breaker, idempotency, backend } = stores;

    const expected: [string, () => Promise<unknown>, Document][] = [
      // Key-value store
      ['kv.get', () => kv.get('k'), { find: { filter: { _id: 'k', $expr: LIVE }, projection: { value: 1 }, limit: 1 } }],
      ['kv.exists', () => kv.exists('k'), { find: { filter: { _id: 'k', $expr: LIVE }, projection: { _id: 1 }, limit: 1 } }],
      ['kv.getEntry', () => kv.getEntry('k'), { find: { filter: { _id: 'k', $expr: LIVE }, projection: { value: 1, version: 1, updatedAt: 1 }, limit: 1 } }],
      ['kv.getMany', () => kv.getMany(['a', 'b']), { find: { filter: { _id: { $in: ['a', 'b'] }, $expr: LIVE }, projection: { value: 1 } } }],
      // A glob beyond its literal start and a trailing `*` is decided by the store: the server searches for its longest literal.
      ['kv.keys', () => kv.keys('a*b'), { find: { filter: { _id: { $gte: 'a', $lt: 'b', $regex: 'b' }, $expr: LIVE }, projection: { value: 0 } } }],
      ['kv.entries', () => kv.entries('a*'), { find: { filter: { _id: { $gte: 'a', $lt: 'b' }, $expr: LIVE }, projection: { value: 0 } } }],
      [
        'kv.set',
        () => kv.set('k', 'v', { ttl: 1000 }),
        { update: [{ q: { _id: 'k' }, u: [{ $set: { value: { $literal: 'v' }, version: NEXT_VERSION, updatedAt: '$$NOW', expiresAt: { $add: ['$$NOW', 1000] } } }], upsert: true }] },
      ],
      [
        'kv.setMany',
        () => kv.setMany([{ key: 'a', value: '1' }, { key: 'b', value: '2', ttl: 5 }]),
        {
          update: [
            { q: { _id: 'a' }, u: [{ $set: { value: { $literal: '1' }, version: NEXT_VERSION, updatedAt: '$$NOW', expiresAt: '$$REMOVE' } }], upsert: true },
            { q: { _id: 'b' }, u: [{ $set: { value: { $literal: '2' }, version: NEXT_VERSION, updatedAt: '$$NOW', expiresAt: { $add: ['$$NOW', 5] } } }], upsert: true },
          ],
        },
      ],
      [
        'kv.compareAndSet at a version',
        () => kv.compareAndSet('k', 'v', 7),
        { update: [{ q: { _id: 'k', version: 7, $expr: LIVE }, u: [{ $set: { value: { $literal: 'v' }, version: '<version>', updatedAt: '$$NOW', expiresAt: '$$REMOVE' } }] }] },
      ],
      [
        // A document without a version (awaitly's own) reads as version 1, and is live by the same $expr.
        'kv.compareAndSet at version 1',
        () => kv.compareAndSet('k', 'v', 1),
        { update: [{ q: { _id: 'k', version: { $in: [1, null] }, $expr: LIVE }, u: [{ $set: { value: { $literal: 'v' }, version: '<version>', updatedAt: '$$NOW', expiresAt: '$$REMOVE' } }] }] },
      ],
      [
        'kv.compareAndSet when absent',
        () => kv.compareAndSet('k', 'v', null, { ttl: 9 }),
        {
          update: [
            {
              q: { _id: 'k' },
              u: [
                { $set: { _create: { $and: [{ $not: [LIVE] }, { $lt: [{ $ifNull: ['$version', 0] }, '<version>'] }] } } },
                {
                  $set: {
                    value: { $cond: ['$_create', { $literal: 'v' }, '$value'] },
                    version: { $cond: ['$_create', '<version>', '$version'] },
                    updatedAt: { $cond: ['$_create', '$$NOW', '$updatedAt'] },
                    expiresAt: { $cond: ['$_create', { $add: ['$$NOW', 9] }, '$expiresAt'] },
                  },
                },
                { $unset: '_create' },
              ],
              upsert: true,
            },
          ],
        },
      ],
      ['kv.delete', () => kv.delete('k'), { update: [{ q: { _id: 'k', $expr: LIVE }, u: TOMBSTONE }] }],
      ['kv.deleteMany', () => kv.deleteMany(['a', 'b']), { update: [{ q: { _id: { $in: ['a', 'b'] }, $expr: LIVE }, u: TOMBSTONE, multi: true }] }],
      [
        'kv.clearExpired',
        () => kv.clearExpired(),
        {
          delete: [
            {
              q: { expiresAt: { $type: 'date' }, $expr: { $lte: ['$expiresAt', { $cond: [{ $eq: [{ $type: '$value' }, 'missing'] }, { $subtract: ['$$NOW', 5000] }, '$$NOW'] }] } },
              limit: 0,
            },
          ],
        },
      ],

      // Snapshot store (prefix "p") and its workflow lock
      [
        'snapshots.save',
        () => snapshots.save('w', { a: 1 }),
        {
          update: [
            {
              q: { _id: 'p\u0000w' },
              u: [{ $set: { value: { $literal: '{"a":1}' }, ns: { $literal: 'p' }, finished: { $literal: '' }, version: NEXT_VERSION, updatedAt: '$$NOW', expiresAt: '$$REMOVE' } }],
              upsert: true,
            },
          ],
        },
      ],
      [
        'snapshots.save when absent',
        () => snapshots.save('w', { a: 1 }, { expectedVersion: null }),
        {
          update: [
            {
              q: { _id: 'p\u0000w' },
              u: [
                { $set: { _create: { $and: [{ $not: [LIVE] }, { $lt: [{ $ifNull: ['$version', 0] }, '<version>'] }] } } },
                {
                  $set: {
                    value: { $cond: ['$_create', { $literal: '{"a":1}' }, '$value'] },
                    ns: { $cond: ['$_create', { $literal: 'p' }, '$ns'] },
                    finished: { $cond: ['$_create', { $literal: '' }, '$finished'] },
                    version: { $cond: ['$_create', '<version>', '$version'] },
                    updatedAt: { $cond: ['$_create', '$$NOW', '$updatedAt'] },
                    expiresAt: { $cond: ['$_create', '$$REMOVE', '$expiresAt'] },
                  },
                },
                { $unset: '_create' },
              ],
              upsert: true,
            },
          ],
        },
      ],
      ['snapshots.load', () => snapshots.load('w'), { find: { filter: { _id: 'p\u0000w', $expr: LIVE }, projection: { value: 1, version: 1, updatedAt: 1 }, limit: 1 } }],
      ['snapshots.delete', () => snapshots.delete('w'), { update: [{ q: { _id: 'p\u0000w', $expr: LIVE }, u: TOMBSTONE }] }],
      [
        'snapshots.list',
        () => snapshots.list({ prefix: 'x', limit: 5 }),
        { find: { filter: { ns: 'p', _id: { $gte: 'p\u0000x', $lt: 'p\u0000y' } }, projection: { updatedAt: 1 }, sort: { updatedAt: -1, _id: 1 }, limit: 6 } },
      ],
      [
        'snapshots.tryAcquire',
        () => snapshots.tryAcquire('w', { ttlMs: 1000 }),
        { findAndModify: { q: { _id: 'p\u0000w' }, u: acquirePipeline('<token>', 1000), upsert: true, new: true } },
      ],

      // Lock provider
      ['locks.acquire', () => locks.acquire('k', 1000, 'me'), { findAndModify: { q: { _id: 'k' }, u: acquirePipeline('me', 1000), upsert: true, new: true } }],
      [
        'locks.extend',
        () => locks.extend('k', 1000, 'me'),
        { findAndModify: { q: { _id: 'k', owner: 'me', $expr: LEASE_LIVE }, u: [{ $set: { expiresAt: { $add: ['$$NOW', 1000] } } }], new: true } },
      ],
      ['locks.release', () => locks.release('k', 'me'), { update: [{ q: { _id: 'k', owner: 'me', $expr: LEASE_LIVE }, u: RELEASE }] }],
      ['locks.forceRelease', () => locks.forceRelease('k'), { update: [{ q: { _id: 'k' }, u: RELEASE }] }],
      [
        'locks.clearExpired',
        () => locks.clearExpired(),
        { update: [{ q: { expiresAt: { $type: 'date' }, $expr: { $lte: ['$expiresAt', '$$NOW'] } }, u: RELEASE, multi: true }] },
      ],

      // Cache (prefix "c")
      ['cache.get', () => cache.get('k'), { find: { filter: { _id: 'c\u0000k', $expr: LIVE }, projection: { value: 1 }, limit: 1 } }],
      [
        'cache.set',
        () => cache.set('k', 1, 1000),
        { update: [{ q: { _id: 'c\u0000k' }, u: [{ $set: { value: { $literal: '1' }, expiresAt: { $add: ['$$NOW', 1000] } } }], upsert: true }] },
      ],
      ['cache.keys', () => cache.keys(), { find: { filter: { _id: { $gte: 'c\u0000', $lt: 'c\u0001' }, $expr: LIVE }, projection: { _id: 1 } } }],
      ['cache.clear', () => cache.clear(), { delete: [{ q: { _id: { $gte: 'c\u0000', $lt: 'c\u0001' } }, limit: 0 }] }],

      // Circuit breaker
      [
        'circuitBreaker.recordFailure',
        () => breaker.recordFailure('s', 3, { cooldown: 100 }),
        {
          findAndModify: {
            q: { _id: 's' },
            u: [
              { $set: { failureCount: { $add: [{ $ifNull: ['$failureCount', 0] }, 1] }, lastFailureTime: '$$NOW', state: { $ifNull: ['$state', 'closed'] } } },
              { $set: { _opens: { $and: [{ $gte: ['$failureCount', 3] }, { $not: [{ $and: [{ $eq: ['$state', 'open'] }, { $not: [COOLED_DOWN] }] }] }] } } },
              { $set: { state: { $cond: ['$_opens', 'open', '$state'] }, openUntil: { $cond: ['$_opens', { $add: ['$$NOW', 100] }, '$openUntil'] } } },
              { $unset: '_opens' },
            ],
            upsert: true,
            new: true,
            fields: { failureCount: 1 },
          },
        },
      ],
      [
        'circuitBreaker.recordSuccess',
        () => breaker.recordSuccess('s'),
        { update: [{ q: { _id: 's' }, u: [{ $set: { state: 'closed', failureCount: 0, lastSuccessTime: '$$NOW', openUntil: '$$REMOVE' } }], upsert: true }] },
      ],
      [
        'circuitBreaker.getState',
        () => breaker.getState('s'),
        {
          aggregate: [
            { $match: { _id: 's' } },
            {
              $project: {
                state: { $cond: [{ $and: [{ $eq: ['$state', 'open'] }, COOLED_DOWN] }, 'half-open', '$state'] },
                failureCount: 1,
                lastFailureTime: 1,
                lastSuccessTime: 1,
                openUntil: 1,
              },
            },
          ],
        },
      ],

      // Idempotency
      [
        'idempotency.reserve',
        () => idempotency.reserve('op', 1000),
        {
          findAndModify: {
            q: { _id: 'op' },
            u: [
              {
                $set: {
                  _claim: {
                    $switch: {
                      branches: [
                        // A claim is free once its lease ran out (a claim written before `leaseUntil` existed: its `expiresAt`).
                        {
                          case: { $eq: ['$status', 'in-flight'] },
                          then: { $not: [{ $gt: [{ $ifNull: ['$leaseUntil', { $ifNull: ['$expiresAt', '1970-01-01T00:00:00.000Z'] }] }, '$$NOW'] }] },
                        },
                        {
                          case: { $eq: ['$status', 'completed'] },
                          then: { $not: [{ $gt: [{ $ifNull: ['$expiresAt', '+275760-09-13T00:00:00.000Z'] }, '$$NOW'] }] },
                        },
                      ],
                      default: true,
                    },
                  },
                },
              },
              {
                $set: {
                  status: { $cond: ['$_claim', 'in-flight', '$status'] },
                  token: { $cond: ['$_claim', { $literal: '<token>' }, '$token'] },
                  // The claim's lease is not in the TTL-indexed expiresAt: a late complete() still finds it.
                  leaseUntil: { $cond: ['$_claim', { $add: ['$$NOW', 1000] }, '$leaseUntil'] },
                  value: { $cond: ['$_claim', '$$REMOVE', '$value'] },
                  expiresAt: { $cond: ['$_claim', '$$REMOVE', '$expiresAt'] },
                },
              },
              { $unset: '_claim' },
            ],
            upsert: true,
            new: true,
          },
        },
      ],
      [
        'idempotency.complete',
        () => idempotency.complete('op', 'tok', 1, 50),
        {
          update: [
            {
              q: { _id: 'op', status: 'in-flight', token: 'tok' },
              u: [{ $set: { status: { $literal: 'completed' }, value: { $literal: '1' }, expiresAt: { $add: ['$$NOW', 50] }, token: '$$REMOVE', leaseUntil: '$$REMOVE' } }],
            },
          ],
        },
      ],
      ['idempotency.get', () => idempotency.get('op'), { find: { filter: { _id: 'op', $expr: LIVE }, projection: { status: 1, value: 1 }, limit: 1 } }],

      // Process backend (the claim itself: see the next test)
      [
        'process.findClaimable',
        () => backend.findClaimable({ process: 'p', state: 's', includeUnclaimed: false, unclaimedFor: 1000, limit: 5 }),
        {
          find: {
            filter: {
              process: 'p',
              current: true,
              state: 's',
              $or: [{ leaseOwner: null, at: { $lte: '<now>' } }, { leaseUntil: { $type: 'date' }, $expr: { $lte: ['$leaseUntil', '$$NOW'] } }],
            },
            projection: { itemId: 1, state: 1, version: 1 },
            sort: { leaseUntil: 1, at: 1 },
            limit: 5,
          },
        },
      ],
      [
        'process.extendLease',
        () => backend.extendLease({ process: 'p', itemId: 'i', version: 2, owner: 'o', lease: 100 }),
        { update: [{ q: { _id: 'p:2:i', process: 'p', itemId: 'i', leaseOwner: 'o', current: true }, u: [{ $set: { leaseUntil: { $add: ['$$NOW', 100] } } }] }] },
      ],
      [
        'process.release',
        () => backend.release({ process: 'p', itemId: 'i', version: 2, owner: 'o', delay: 5, refundAttempt: true, error: 'boom' }),
        {
          update: [
            {
              q: { _id: 'p:2:i', process: 'p', itemId: 'i', leaseOwner: 'o', current: true },
              u: [{ $set: { leaseUntil: { $add: ['$$NOW', 5] }, attempts: { $max: [0, { $subtract: ['$attempts', 1] }] }, lastError: { $literal: 'boom' } } }],
            },
          ],
        },
      ],
    ];
    for (const [name, operation, command] of expected) expect(await sent(operation), name).toEqual([command]);
    await stores.close();
  });

  it('process versions: a claim is one findAndModify, a new version one findAndModify upsert with $$NOW', async () => {
    // On a server whose updates are not atomic (FerretDB) the backend claims with tickets, and
    // a transition first reads the old version: the dialect is called directly here.
    const clock = new MeasuredClock(async () => new Date());
    await clock.measure();
    const dialect = new PipelineDialect(clock);
    const collection = client.db(s.database).collection<ProcessVersionDocument>(uniqueName('pc_versions'));
    const identity = { _id: 'p:1:i', process: 'p', itemId: 'i', state: 's', current: true };
    expect(await sent(() => dialect.claimItem(collection, identity, '$owner', 250))).toEqual([
      {
        findAndModify: {
          q: { ...identity, $expr: { $lte: [{ $ifNull: ['$leaseUntil', '1970-01-01T00:00:00.000Z'] }, '$$NOW'] } },
          u: [{ $set: { leaseOwner: { $literal: '$owner' }, leaseUntil: { $add: ['$$NOW', 250] }, attempts: { $add: ['$attempts', 1] } } }],
          new: true,
        },
      },
    ]);
    const version = {
      _id: 'p:2:i', process: 'p', itemId: 'i', version: 2, state: '$t', from: 's', kind: 'advance' as const, key: 'k', data: '{}',
      current: true, attempts: 0, lastError: null, error: null, leaseOwner: null, leaseUntil: null,
    };
    const ifNew = (name: string, value: unknown) => ({ $cond: ['$_new', value, `$${name}`] });
    const { _id, ...fields } = version;
    const insert = (createdAt: unknown) => [
      {
        findAndModify: {
          q: { _id, process: 'p', itemId: 'i' },
          u: [
            { $set: { _new: { $eq: [{ $type: '$state' }, 'missing'] } } },
            { $set: { ...Object.fromEntries(Object.entries(fields).map(([name, value]) => [name, ifNew(name, { $literal: value })])), createdAt: ifNew('createdAt', createdAt), at: ifNew('at', '$$NOW') } },
            { $unset: '_new' },
          ],
          upsert: true,
          new: true,
        },
      },
    ];
    expect(await sent(() => dialect.insertVersion(collection, version)), 'a new item').toEqual(insert('$$NOW'));
    expect(await sent(() => dialect.insertVersion(collection, { ...version, createdAt: new Date() })), 'a transition').toEqual(insert({ $literal: '<now>' }));
  });

  it('never put $expr in an upsert filter, and wrap every caller string inside a pipeline in $literal', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('pc_kv')));
    const locks = await whenReady(new MongoLockProvider(options('pc_locks')));
    const cache = await whenReady(new MongoCacheProvider(options('pc_cache')));
    const breaker = await whenReady(new MongoCircuitBreakerStore(options('pc_circuit')));
    const idempotency = await whenReady(new MongoIdempotencyStore(options('pc_idempotency')));
    const snapshots = await whenReady(mongo<JsonObject>({ ...options('pc_snapshots'), prefix: HOSTILE.prefix }));
    const backend = await whenReady(new MongoProcessBackend(options('pc_process')));
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
      () => snapshots.save(HOSTILE.key, { v: HOSTILE.value }),
      () => snapshots.save(HOSTILE.key, { v: HOSTILE.value }, { expectedVersion: null }),
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
      () => backend.release({ process: 'p', itemId: HOSTILE.key, version: 1, owner: HOSTILE.owner, delay: 0, refundAttempt: false, error: HOSTILE.value }),
    ];
    for (const attempt of attempts) await attempt().catch(() => undefined); // a server without pipelines refuses them
    await Promise.all([kv, locks, cache, breaker, idempotency, snapshots, backend].map((store) => store.close()));

    const writes = commands.filter((event) => event.commandName === 'update' || event.commandName === 'findAndModify');
    expect(writes.length).toBeGreaterThan(10);
    const pipelines: Document[][] = [];
    for (const { command, commandName } of writes) {
      const statements: Document[] =
        commandName === 'update' ? (command.updates as Document[]) : [{ q: command.query, u: command.update, upsert: command.upsert }];
      for (const statement of statements) {
        if (statement.upsert) expect(containsKey(statement.q, '$expr'), JSON.stringify(statement.q)).toBe(false);
        if (Array.isArray(statement.u)) pipelines.push(statement.u as Document[]);
      }
    }
    expect(pipelines.length).toBeGreaterThan(10);
    const needles = [HOSTILE.value, HOSTILE.owner, HOSTILE.prefix, JSON.stringify(HOSTILE.value), JSON.stringify({ v: HOSTILE.value })];
    for (const pipeline of pipelines) expect(unwrapped(pipeline, needles), JSON.stringify(pipeline)).toEqual([]);
  });
});

const HOSTILE = { value: '$hostile.value', owner: '$hostile.owner', prefix: '$hostile.prefix', key: '$$NOW' };

/** `$expr`: an open circuit's cool-down has ended. */
const COOLED_DOWN = { $and: [{ $eq: [{ $type: '$openUntil' }, 'date'] }, { $lte: ['$openUntil', '$$NOW'] }] };

/** The update pipeline of a lease acquisition by `owner` for `ttl` ms. */
function acquirePipeline(owner: string, ttl: number): Document[] {
  const isOwner = { $eq: ['$owner', { $literal: owner }] };
  const ifGranted = (granted: unknown, kept: unknown) => ({ $cond: ['$_grant', granted, kept] });
  return [
    { $set: { _grant: { $or: [{ $not: [LEASE_LIVE] }, isOwner] }, _renew: { $and: [LEASE_LIVE, isOwner] } } },
    {
      $set: {
        fence: ifGranted({ $cond: ['$_renew', '$fence', { $add: [{ $ifNull: ['$fence', 0] }, 1] }] }, '$fence'),
        owner: ifGranted({ $literal: owner }, '$owner'),
        expiresAt: ifGranted({ $add: ['$$NOW', ttl] }, '$expiresAt'),
        renewed: ifGranted('$_renew', '$renewed'),
      },
    },
    { $unset: ['_grant', '_renew'] },
  ];
}

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
