import type { Lease, LeaseDriver } from '@stowage/core/adapter';
import type { Collection, Document, UpdateFilter } from 'mongodb';
import type { Ready, StoreDatabase } from '../database.js';
import type { MongoDialect } from '../dialects/dialect.js';
import type { LockDocument } from '../documents.js';

/** What the leases use of their store's database (the lock provider's, or a snapshot store's). */
type LeaseDatabase = Pick<StoreDatabase, 'ready' | 'onClose'>;

/** A release: the lease ends, the fence stays. */
const RELEASE: UpdateFilter<LockDocument> = { $unset: { owner: '', expiresAt: '' } };

/**
 * The kit's {@link LeaseDriver} on a lock collection (the lock provider's, or a snapshot
 * store's workflow locks): one command per operation, the server's clock for every lease
 * (see `MongoDialect.acquireLease`), and, on replica sets and sharded clusters, waiting
 * acquisitions woken by a change stream the moment a lease is released.
 */
export class MongoLeases implements LeaseDriver {
  readonly #connection: LeaseDatabase;
  readonly #kind: 'locks' | 'workflowLocks';
  #wakeups: ReleaseWakeups | undefined;

  /** The change stream of the wake-ups closes with the store of `connection`. */
  constructor(connection: LeaseDatabase, kind: 'locks' | 'workflowLocks') {
    this.#connection = connection;
    this.#kind = kind;
    connection.onClose(() => this.close());
  }

  async acquire(key: string, owner: string, ttl: number): Promise<Lease | null> {
    const { collection, dialect } = await this.#use();
    return dialect.acquireLease(collection, key, owner, ttl);
  }

  async extend(key: string, owner: string, ttl: number): Promise<Date | null> {
    const { collection, dialect } = await this.#use();
    return dialect.extendLease(collection, key, owner, ttl);
  }

  async release(key: string, owner: string): Promise<boolean> {
    const { collection, dialect } = await this.#use();
    return (await collection.updateOne({ _id: key, owner, ...dialect.liveLease() }, RELEASE)).matchedCount === 1;
  }

  async forceRelease(key: string): Promise<void> {
    const { collection } = await this.#use();
    await collection.updateOne({ _id: key }, RELEASE);
  }

  /**
   * A read on the primary (`isValid`): advisory. During a failover a deposed primary that has
   * not noticed yet can still answer true for a lease the new primary has let expire and
   * granted again; the fencing token is the guarantee, and `extend` (a majority write) is the
   * check that the lease is still held.
   */
  async isHeld(key: string, owner: string): Promise<boolean> {
    const { collection, dialect } = await this.#use();
    return (await collection.findOne({ _id: key, owner, ...dialect.liveLease() }, { projection: { _id: 1 } })) !== null;
  }

  /** Ends the leases whose time ran out; the lock documents (and their fences) stay. */
  async clearExpired(): Promise<number> {
    const { collection, dialect } = await this.#use();
    return (await collection.updateMany(dialect.endedLeases(), RELEASE)).modifiedCount;
  }

  /** Where the server has change streams: resolves at the next release of `key`; elsewhere only on abort (waits poll). */
  async waitForRelease(key: string, signal: AbortSignal): Promise<void> {
    let ready: Ready;
    try {
      ready = await this.#connection.ready();
    } catch {
      return untilAborted(signal); // the next attempt reports the error
    }
    if (!ready.features.changeStreams) return untilAborted(signal);
    const collection = ready.collection<LockDocument>(this.#kind);
    this.#wakeups ??= new ReleaseWakeups(() => collection.watch<LockDocument>(RELEASES) as unknown as ReleaseStream);
    return this.#wakeups.wait(key, signal);
  }

  /** Stops the change stream (when the store closes). */
  async close(): Promise<void> {
    await this.#wakeups?.close();
  }

  async #use(): Promise<{ collection: Collection<LockDocument>; dialect: MongoDialect }> {
    const ready = await this.#connection.ready();
    return { collection: ready.collection<LockDocument>(this.#kind), dialect: ready.dialect };
  }
}

/** How long a waiting acquisition waits for the change stream to be established before going on without. */
const STREAM_READY_TIMEOUT = 2_000;

/** The part of a driver `ChangeStream` the wake-ups use (a test passes a stand-in where no server has change streams). */
export interface ReleaseStream {
  on(event: 'change', listener: (change: Document) => void): unknown;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  once(event: 'resumeTokenChanged' | 'error' | 'close', listener: () => void): unknown;
  close(): Promise<void>;
}

/** The change stream of lease releases on a lock collection: deletes, replacements, and updates that remove `owner`. */
export const RELEASES: Document[] = [
  {
    $match: {
      $or: [{ operationType: { $in: ['delete', 'replace'] } }, { operationType: 'update', 'updateDescription.removedFields': 'owner' }],
    },
  },
  { $project: { documentKey: 1 } },
];

/**
 * Wakes waiting acquisitions when a lease is released, through one change stream per lock
 * store, shared by all its waiters: opened by the first wait, kept open until the store
 * closes (so wait episodes do not open and close streams), and opened again by the next wait
 * after an error. Each release wakes only the waiters of its key. Expiries produce no event and
 * are found by polling, as is anything missed while the stream (re)starts.
 */
export class ReleaseWakeups {
  readonly #watch: () => ReleaseStream;
  readonly #waiters = new Map<string, Set<() => void>>();
  #stream: ReleaseStream | undefined;
  #closed = false;

  /** `watch` opens the stream (`collection.watch(RELEASES)`). */
  constructor(watch: () => ReleaseStream) {
    this.#watch = watch;
  }

  /**
   * The first wait after the stream opens returns once it is established (so the next attempt
   * runs with the stream in place: no release can slip between that attempt and the next
   * wait); later waits resolve at the next release of `key`, or on abort.
   */
  wait(key: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted || this.#closed) return untilAborted(signal);
    if (!this.#stream) return untilAborted(signal, this.#open());
    return new Promise<void>((resolve) => {
      let waiters = this.#waiters.get(key);
      if (!waiters) this.#waiters.set(key, (waiters = new Set()));
      const done = () => {
        waiters.delete(done);
        if (waiters.size === 0) this.#waiters.delete(key);
        signal.removeEventListener('abort', done);
        resolve();
      };
      waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    const stream = this.#stream;
    this.#stream = undefined;
    for (const waiters of [...this.#waiters.values()]) for (const wake of [...waiters]) wake();
    await stream?.close().catch(() => undefined);
  }

  /** Opens the stream; resolves once the server established it (or could not: polling still works). */
  #open(): Promise<void> {
    const stream = this.#watch();
    this.#stream = stream;
    // The driver reports the stream's first resume token once the server has opened it.
    const established = new Promise<void>((resolve) => {
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
      if (typeof key === 'string') for (const wake of [...(this.#waiters.get(key) ?? [])]) wake();
    });
    stream.on('error', () => {
      // Waiters fall back to polling; the next wait opens a new stream.
      if (this.#stream === stream) this.#stream = undefined;
      void stream.close().catch(() => undefined);
    });
    return established;
  }
}

/** `promise` (default: one that never settles), or settled early when `signal` aborts; never rejects. */
function untilAborted(signal: AbortSignal, promise: Promise<void> = new Promise<void>(() => {})): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      signal.removeEventListener('abort', done);
      resolve();
    };
    signal.addEventListener('abort', done, { once: true });
    promise.then(done, done);
  });
}
