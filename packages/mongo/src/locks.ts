import {
  StowageLockHandle,
  acquireWithWait,
  assertValidDuration,
  assertValidKey,
  assertValidOwner,
  parseAcquireArgs,
  runWithLock,
  type AcquireOptions,
  type Lease,
  type LeaseOperations,
  type LockHandle,
  type LockProvider,
  type WithLockOptions,
} from '@stowage/core';
import type { ChangeStream, Collection, Document, WriteConcernSettings } from 'mongodb';
import { LEASE_IS_LIVE, ServerTime, expiresIn, literal } from './clock.js';
import { isDuplicateKeyError } from './errors.js';
import { MongoResource, type MongoStoreOptions, type ReadyStore, type SharedConnection } from './resource.js';

/**
 * One lock per key. The document outlives its leases: `fence` counts every acquisition ever
 * granted for the key, so the collection has no TTL index (a TTL deletion would reset it) and a
 * release only removes `owner` and `expiresAt`.
 */
export interface LockDocument {
  _id: string;
  /** Highest fencing token granted for this key. */
  fence: number;
  /** Present while a lease is (or was, until it expired) held. */
  owner?: string;
  /** Server time at which the lease ends. */
  expiresAt?: Date;
}

export interface MongoLockProviderOptions extends MongoStoreOptions {
  /** Write concern of every lock write. Default `{ w: 'majority' }`: a granted lease survives a failover. */
  writeConcern?: WriteConcernSettings;
}

const MAJORITY: WriteConcernSettings = { w: 'majority' };

/**
 * {@link LockProvider} on MongoDB: leases with owner tokens and fencing tokens that never go
 * back, waiting acquisition woken by change streams (replica sets and sharded clusters; polling
 * elsewhere), and `withLock`.
 */
export class MongoLockProvider extends MongoResource<LockDocument> implements LockProvider {
  #wakeups: ReleaseWakeups | undefined;
  readonly #leaseOperations: LeaseOperations = {
    extendLease: (key, ttl, owner) => this.run((ready) => extendLease(ready, key, ttl, owner)),
    release: (key, owner) => this.run((ready) => releaseLease(ready, key, owner)),
    isHeld: (key, owner) =>
      this.run(async ({ collection, time }) => {
        return (await collection.findOne({ _id: key, owner, ...time.liveLease() }, { projection: { _id: 1 } })) !== null;
      }),
  };

  constructor(options: MongoLockProviderOptions, internal?: SharedConnection) {
    super('MongoLockProvider', 'locks', options, { ...internal, writeConcern: options?.writeConcern ?? MAJORITY });
  }

  protected override get hasWakeups(): boolean {
    return true;
  }

  async acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    this.lifecycle.assertOpen();
    const options = parseAcquireArgs(key, ttl, ownerOrOptions);
    // A generated owner cannot already hold the lock, which spares the classic dialect a command.
    const ownerGiven = typeof ownerOrOptions === 'string' || ownerOrOptions?.owner !== undefined;
    return this.run(async (ready) => {
      // With change streams, the first pause of a waiting acquisition subscribes to releases of
      // the key (and returns at once, so the next attempt runs with the subscription in place:
      // no release can slip between an attempt and the wait); later pauses wait for a release.
      let subscription: ReleaseSubscription | undefined;
      const wakeup = ready.features.changeStreams
        ? async (signal: AbortSignal) => {
            if (subscription) return subscription.next(signal);
            subscription = this.#releaseWakeups(ready.collection).subscribe(key);
            await subscription.ready(signal);
          }
        : undefined;
      try {
        const lease = await acquireWithWait(
          () => {
            this.lifecycle.assertOpen();
            return tryAcquire(ready, key, ttl, options.owner, ownerGiven);
          },
          options,
          wakeup,
        );
        return lease === null ? null : new StowageLockHandle(lease, this.#leaseOperations);
      } finally {
        subscription?.close();
      }
    });
  }

  async extend(key: string, ttl: number, owner: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertValidDuration(ttl, 'ttl');
    assertValidOwner(owner);
    return (await this.#leaseOperations.extendLease(key, ttl, owner)) !== null;
  }

  async release(key: string, owner: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertValidOwner(owner);
    return this.#leaseOperations.release(key, owner);
  }

  async forceRelease(key: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    await this.run(({ collection }) => collection.updateOne({ _id: key }, { $unset: { owner: '', expiresAt: '' } }));
  }

  async withLock<T>(
    key: string,
    fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>,
    options: WithLockOptions,
  ): Promise<T> {
    this.lifecycle.assertOpen();
    return runWithLock((k, t, o) => this.acquire(k, t, o), key, fn, options);
  }

  protected override async beforeClose(): Promise<void> {
    await this.#wakeups?.close();
  }

  #releaseWakeups(collection: Collection<LockDocument>): ReleaseWakeups {
    this.#wakeups ??= new ReleaseWakeups(collection);
    return this.#wakeups;
  }
}

function toLease(key: string, owner: string, document: Pick<LockDocument, 'fence' | 'expiresAt'>): Lease {
  return { key, owner, fence: Number(document.fence), expiresAt: document.expiresAt! };
}

/**
 * One attempt. Pipeline dialect, one command in every case: an upsert on `{ _id: key }` whose
 * pipeline grants the lease when it is free (released, expired or never taken) or held by this
 * owner, keeping the fence for the holder renewing and adding one otherwise, all decided on
 * `$$NOW`; when another owner holds a live lease it leaves the document as it is (a no-op). The
 * returned document says who holds the lease. (MongoDB refuses `$expr` in an upsert's filter,
 * hence the decision inside the pipeline.) Two first-time upserts of a new key can race to
 * insert; the loser's duplicate-key error (E11000) means "held".
 */
async function tryAcquire(
  { collection, time }: ReadyStore<LockDocument>,
  key: string,
  ttl: number,
  owner: string,
  ownerGiven: boolean,
): Promise<Lease | null> {
  if (time.dialect === 'pipeline') {
    const ifGranted = (granted: unknown, kept: unknown) => ({ $cond: ['$grant', granted, kept] });
    try {
      const document = await collection.findOneAndUpdate(
        { _id: key },
        [
          {
            $set: {
              grant: { $or: [{ $not: [LEASE_IS_LIVE] }, { $eq: ['$owner', literal(owner)] }] },
              renew: { $and: [LEASE_IS_LIVE, { $eq: ['$owner', literal(owner)] }] },
            },
          },
          {
            $set: {
              fence: ifGranted({ $cond: ['$renew', '$fence', { $add: [{ $ifNull: ['$fence', 0] }, 1] }] }, '$fence'),
              owner: ifGranted(literal(owner), '$owner'),
              expiresAt: ifGranted(expiresIn(ttl), '$expiresAt'),
            },
          },
          { $unset: ['grant', 'renew'] },
        ],
        { upsert: true, returnDocument: 'after' },
      );
      return document?.owner === owner ? toLease(key, owner, document) : null;
    } catch (error) {
      if (isDuplicateKeyError(error)) return null;
      throw error;
    }
  }

  // Classic dialect: operator updates cannot choose between "keep" and "add one" for the fence,
  // so taking a free lease and renewing one's own are two commands; the second runs only when
  // the lock is held and the caller named an owner (who may be the holder).
  const now = time.now();
  try {
    const document = await collection.findOneAndUpdate(
      { _id: key, ...time.freeLease(now) },
      { $set: { owner, expiresAt: ServerTime.after(now, ttl) }, $inc: { fence: 1 } },
      { upsert: true, returnDocument: 'after' },
    );
    if (document) return toLease(key, owner, document);
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
  }
  if (!ownerGiven) return null;
  // Same instant as the first command: a lease that was live then is renewed even if it ran out since.
  const renewed = await renew(collection, time, key, ttl, owner, now);
  return renewed && toLease(key, owner, renewed);
}

function renew(
  collection: Collection<LockDocument>,
  time: ServerTime,
  key: string,
  ttl: number,
  owner: string,
  now = time.now(),
): Promise<Pick<LockDocument, 'fence' | 'expiresAt'> | null> {
  const update =
    time.dialect === 'pipeline' ? [{ $set: { expiresAt: expiresIn(ttl) } }] : { $set: { expiresAt: ServerTime.after(now, ttl) } };
  return collection.findOneAndUpdate({ _id: key, owner, ...time.liveLease(now) }, update, { returnDocument: 'after' });
}

async function extendLease({ collection, time }: ReadyStore<LockDocument>, key: string, ttl: number, owner: string) {
  return (await renew(collection, time, key, ttl, owner))?.expiresAt ?? null;
}

async function releaseLease({ collection, time }: ReadyStore<LockDocument>, key: string, owner: string): Promise<boolean> {
  const result = await collection.updateOne({ _id: key, owner, ...time.liveLease() }, { $unset: { owner: '', expiresAt: '' } });
  return result.matchedCount === 1;
}

/** One waiting acquisition's interest in the releases of one key. */
interface ReleaseSubscription {
  /** Resolves once the change stream is established (or could not be: polling still works). */
  ready(signal: AbortSignal): Promise<void>;
  /** Resolves at the next release of the key since the last call (at once if one came already), or on abort. */
  next(signal: AbortSignal): Promise<void>;
  close(): void;
}

interface Subscriber {
  key: string;
  released: boolean;
  wake: (() => void) | undefined;
}

/** How long a waiting acquisition waits for the change stream to be established before going on without. */
const STREAM_READY_TIMEOUT = 2_000;

/**
 * Wakes waiting acquisitions when a lease is released, through one change stream per provider
 * on the lock collection, open only while someone waits. Expiries produce no event and are
 * found by polling, as is anything missed while the stream (re)starts.
 */
class ReleaseWakeups {
  readonly #collection: Collection<LockDocument>;
  readonly #subscribers = new Set<Subscriber>();
  #stream: ChangeStream<LockDocument> | undefined;
  #established: Promise<void> | undefined;

  constructor(collection: Collection<LockDocument>) {
    this.#collection = collection;
  }

  subscribe(key: string): ReleaseSubscription {
    const subscriber: Subscriber = { key, released: false, wake: undefined };
    this.#subscribers.add(subscriber);
    this.#open();
    return {
      ready: (signal) => untilAborted(this.#established ?? Promise.resolve(), signal),
      next: (signal) => {
        if (subscriber.released) {
          subscriber.released = false;
          return Promise.resolve();
        }
        return untilAborted(
          new Promise<void>((resolve) => {
            subscriber.wake = resolve;
          }),
          signal,
        ).finally(() => {
          subscriber.wake = undefined;
        });
      },
      close: () => {
        this.#subscribers.delete(subscriber);
        subscriber.wake?.();
        if (this.#subscribers.size === 0) void this.close();
      },
    };
  }

  async close(): Promise<void> {
    const stream = this.#stream;
    this.#stream = undefined;
    this.#established = undefined;
    await stream?.close().catch(() => undefined);
  }

  #open(): void {
    if (this.#stream) return;
    const releases: Document[] = [
      {
        $match: {
          $or: [
            { operationType: { $in: ['delete', 'replace'] } },
            { operationType: 'update', 'updateDescription.removedFields': 'owner' },
          ],
        },
      },
      { $project: { documentKey: 1 } },
    ];
    const stream = this.#collection.watch<LockDocument>(releases);
    this.#stream = stream;
    // The driver reports the stream's first resume token once the server has opened it.
    this.#established = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, STREAM_READY_TIMEOUT);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      stream.once('resumeTokenChanged', done);
      stream.once('error', done);
      stream.once('close', done);
    });
    stream.on('change', (change) => {
      const key = (change as { documentKey?: { _id?: unknown } }).documentKey?._id;
      for (const subscriber of this.#subscribers) {
        if (subscriber.key !== key) continue;
        if (subscriber.wake) subscriber.wake();
        else subscriber.released = true;
      }
    });
    stream.on('error', () => {
      // Waiters fall back to polling; the next subscription opens a new stream.
      if (this.#stream === stream) {
        this.#stream = undefined;
        this.#established = undefined;
      }
      void stream.close().catch(() => undefined);
    });
  }
}

/** `promise`, or settled (resolved) early when `signal` aborts; never rejects. */
function untilAborted(promise: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const onAbort = () => resolve();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
    );
  });
}
