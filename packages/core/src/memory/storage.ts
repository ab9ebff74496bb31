import type { Capabilities } from '../capabilities.js';
import { monotonicClock, type Clock } from '../clock.js';
import { StowageError } from '../errors.js';
import type { StoredCheckpoint } from '../adapter/checkpoints.js';
import type { Lease, LeaseDriver } from '../adapter/lock-support.js';
import { localHandle } from '../adapter/store.js';

/**
 * What the in-memory adapter can do. Every operation runs atomically on the event loop, so
 * batches are all-or-nothing without a transaction API; state lives in one process only.
 */
export const MEMORY_CAPABILITIES: Capabilities = Object.freeze({
  serverClock: true,
  fencing: true,
  // Expired entries are also dropped by an occasional sweep during writes (see MemoryStorage).
  ttlIndex: true,
  changeFeed: false,
  wakeups: true,
  transactions: true,
  crossProcess: false,
  atomicUpdates: true,
});

/** The handle of every in-memory store: nothing to connect, map or free. */
export const MEMORY_HANDLE = localHandle(MEMORY_CAPABILITIES);

export interface MemoryStorageOptions {
  /** The storage's own clock, used for every expiry and timestamp. Default: {@link monotonicClock}. */
  clock?: Clock;
}

/** Options every in-memory contract object accepts. */
export interface MemoryOptions {
  /**
   * The store's clock. Default: the storage's clock ({@link monotonicClock} unless the
   * storage was created with another), which mocking `Date` does not move.
   */
  clock?: Clock;
  /**
   * Shared state. Objects built on one storage behave like several processes on one database.
   * Default: a new private storage.
   */
  storage?: MemoryStorage;
}

export interface KeyValueRecord {
  value: string;
  version: number;
  updatedAt: number;
  expiresAt: number | null;
}

export interface SnapshotRecord {
  text: string;
  version: number;
  updatedAt: number;
}

export interface CacheRecord {
  text: string;
  expiresAt: number | null;
}

export interface CircuitRecord {
  state: 'closed' | 'open' | 'half-open';
  failureCount: number;
  lastFailureTime?: number;
  lastSuccessTime?: number;
  openUntil?: number;
}


export type IdempotencyEntry =
  | { status: 'in-flight'; token: string; expiresAt: number }
  | { status: 'completed'; text: string; expiresAt: number | null };

/**
 * Leases by key, with fencing tokens that never go back and in-process wake-ups on release.
 * Both the lock provider and the snapshot store's `WorkflowLock` use one, through
 * {@link MemoryLeaseTable.driver}.
 */
export class MemoryLeaseTable {
  readonly #leases = new Map<string, { owner: string; fence: number; expiresAt: number }>();
  /** Highest fence ever granted per key; never reset, not even by forceRelease. */
  readonly #fences = new Map<string, number>();
  readonly #waiters = new Map<string, Set<() => void>>();

  /** The lease operations of this table, on `clock`. */
  driver(clock: Clock): LeaseDriver {
    return {
      acquire: async (key, owner, ttl) => this.#acquire(key, owner, ttl, clock.now()),
      extend: async (key, owner, ttl) => {
        const current = this.#live(key, owner, clock.now());
        if (!current) return null;
        current.expiresAt = clock.now() + ttl;
        return new Date(current.expiresAt);
      },
      release: async (key, owner) => {
        if (!this.#live(key, owner, clock.now())) return false;
        this.#leases.delete(key);
        this.#wakeOne(key);
        return true;
      },
      forceRelease: async (key) => {
        if (this.#leases.delete(key)) this.#wakeOne(key);
      },
      isHeld: async (key, owner) => this.#live(key, owner, clock.now()) !== undefined,
      waitForRelease: (key, signal) => this.#waitForRelease(key, signal),
      clearExpired: async () => {
        const now = clock.now();
        let removed = 0;
        for (const [key, lease] of this.#leases) {
          if (lease.expiresAt <= now) {
            this.#leases.delete(key);
            removed++;
          }
        }
        return removed;
      },
    };
  }

  #acquire(key: string, owner: string, ttl: number, now: number): Lease | null {
    const current = this.#leases.get(key);
    if (current && current.expiresAt > now && current.owner !== owner) return null;
    const renewed = current !== undefined && current.expiresAt > now;
    let fence: number;
    if (renewed) {
      fence = current.fence;
    } else {
      fence = (this.#fences.get(key) ?? 0) + 1;
      this.#fences.set(key, fence);
    }
    const expiresAt = now + ttl;
    this.#leases.set(key, { owner, fence, expiresAt });
    return { key, owner, fence, expiresAt: new Date(expiresAt), renewed };
  }

  #live(key: string, owner: string, now: number) {
    const current = this.#leases.get(key);
    return current !== undefined && current.owner === owner && current.expiresAt > now ? current : undefined;
  }

  /** Resolves when `key` is released (or force-released); never rejects, settles on abort. */
  #waitForRelease(key: string, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      let waiters = this.#waiters.get(key);
      if (!waiters) this.#waiters.set(key, (waiters = new Set()));
      const done = () => {
        waiters.delete(done);
        if (waiters.size === 0 && this.#waiters.get(key) === waiters) this.#waiters.delete(key);
        signal.removeEventListener('abort', done);
        resolve();
      };
      waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** A release hands the key to the longest waiter only; the others keep waiting (or poll). */
  #wakeOne(key: string): void {
    const first = this.#waiters.get(key)?.values().next();
    if (first && !first.done) first.value();
  }
}

/**
 * The state of one in-memory "database". Build several contract objects on one storage to
 * get several "processes" sharing data, as the conformance suite does.
 */
export class MemoryStorage {
  readonly clock: Clock;
  /** @internal */ readonly kv = new Map<string, KeyValueRecord>();
  /** @internal Snapshots by prefix, then id: each prefix is its own namespace. */
  readonly snapshots = new Map<string, Map<string, SnapshotRecord>>();
  /** @internal */ readonly locks = new MemoryLeaseTable();
  /** @internal */ readonly workflowLocks = new MemoryLeaseTable();
  /** @internal Cache entries by prefix, then key: each prefix is its own namespace. */
  readonly cache = new Map<string, Map<string, CacheRecord>>();
  /** @internal */ readonly circuits = new Map<string, CircuitRecord>();
  /** @internal */ readonly checkpoints = new Map<string, StoredCheckpoint>();
  /** @internal Checkpoint ids by task and sequence: the unique `(taskId, sequence)` index. */
  readonly checkpointsByTask = new Map<string, Map<number, string>>();
  /** @internal */ readonly idempotency = new Map<string, IdempotencyEntry>();

  readonly #writesSinceSweep = new Map<Map<string, Expiring>, number>();
  #lastVersion = 0;

  constructor(options: MemoryStorageOptions = {}) {
    assertClock(options.clock);
    this.clock = options.clock ?? monotonicClock;
  }

  /**
   * @internal The version of a write: higher than every version this storage ever handed out,
   * so a version is never reused for a key, also after delete or expiry.
   */
  nextVersion(): number {
    return ++this.#lastVersion;
  }

  /** @internal The table of one namespace, created on first use. */
  namespace<T>(tables: Map<string, Map<string, T>>, prefix: string): Map<string, T> {
    let table = tables.get(prefix);
    if (!table) tables.set(prefix, (table = new Map()));
    return table;
  }

  /**
   * @internal Called after each write to a table with expiring entries. Every
   * {@link SWEEP_EVERY_WRITES} writes it drops the table's expired entries, so memory stays
   * bounded without timers even if nobody calls `clearExpired()`.
   */
  noteWrite(table: Map<string, Expiring>, now: number): void {
    const writes = (this.#writesSinceSweep.get(table) ?? 0) + 1;
    if (writes < SWEEP_EVERY_WRITES) {
      this.#writesSinceSweep.set(table, writes);
      return;
    }
    this.#writesSinceSweep.set(table, 0);
    for (const [key, entry] of table) if (!isLive(entry.expiresAt, now)) table.delete(key);
  }
}

/** How often (in writes per table) the in-memory adapter sweeps expired entries. */
export const SWEEP_EVERY_WRITES = 1_000;

interface Expiring {
  expiresAt: number | null;
}

export function createMemoryStorage(options: MemoryStorageOptions = {}): MemoryStorage {
  return new MemoryStorage(options);
}

/** Resolves `{ clock, storage }` options; a private storage gets the given clock. */
export function resolveMemoryOptions(options: MemoryOptions | undefined): { storage: MemoryStorage; clock: Clock } {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new StowageError('E_INVALID_OPTION', 'options must be an object');
  }
  const { clock, storage } = options ?? {};
  assertClock(clock);
  if (storage !== undefined && !(storage instanceof MemoryStorage)) {
    throw new StowageError('E_INVALID_OPTION', 'storage must come from createMemoryStorage()');
  }
  if (storage === undefined) {
    const own = new MemoryStorage({ clock });
    return { storage: own, clock: own.clock };
  }
  return { storage, clock: clock ?? storage.clock };
}

function assertClock(clock: unknown): asserts clock is Clock | undefined {
  if (clock !== undefined && (clock === null || typeof (clock as Clock).now !== 'function')) {
    throw new StowageError('E_INVALID_OPTION', 'clock must be an object with a now() method');
  }
}

export function isLive(expiresAt: number | null | undefined, now: number): boolean {
  return expiresAt === null || expiresAt === undefined || expiresAt > now;
}
