/**
 * Deliberately broken variants of the in-memory adapter. Each has one bug that a real adapter
 * could plausibly have; the conformance suite must catch every one (see conformance-catches-bugs.test.ts).
 * Never shipped: these live under test/.
 */
import type { CacheProvider } from '../../src/contracts/cache.js';
import type { CheckpointStore } from '../../src/contracts/checkpoints.js';
import type { CircuitBreakerStore } from '../../src/contracts/circuit-breaker.js';
import type { IdempotencyStore } from '../../src/contracts/idempotency.js';
import type { KeyValueStore } from '../../src/contracts/kv.js';
import type { AcquireOptions, LockHandle, LockProvider } from '../../src/contracts/locks.js';
import type { SnapshotSaveOptions, SnapshotStore } from '../../src/contracts/snapshots.js';
import { escapeGlob } from '../../src/glob.js';
import { assertJsonValue, type JsonObject } from '../../src/json.js';
import { isResumeState, serializeResumeState } from '../../src/adapter/resume-state.js';
import type { ProcessBackend, TransitionRequest } from '../../src/contracts/process.js';
import type { ConformanceAdapter, ConformanceContext } from '../../src/conformance/types.js';
import { StowageError, isStowageError } from '../../src/errors.js';
import {
  MemoryCacheProvider,
  MemoryCheckpointStore,
  MemoryCircuitBreakerStore,
  MemoryIdempotencyStore,
  MemoryKeyValueStore,
  MemoryLockProvider,
  MemoryProcessBackend,
  createMemoryStorage,
  memory,
  type MemoryStorage,
} from '../../src/memory/index.js';

/** `target` with some members replaced; other methods stay bound to `target` (private fields work). */
function override<T extends object>(target: T, overrides: Partial<Record<keyof T, unknown>>): T {
  return new Proxy(target, {
    get(object, property) {
      if (Object.hasOwn(overrides, property)) return overrides[property as keyof T];
      const value: unknown = Reflect.get(object, property, object);
      return typeof value === 'function' ? value.bind(object) : value;
    },
  });
}

/** The honest memory adapter's factories on one storage (it has no transaction to begin), for a variant to break one of. */
function memoryContext(storage: MemoryStorage): Required<Omit<ConformanceContext, 'cleanup' | 'beginTransaction'>> {
  return {
    kv: async () => new MemoryKeyValueStore({ storage }),
    snapshots: async ({ lock, prefix }) => (lock ? memory({ storage, prefix, lock: true }) : memory({ storage, prefix })),
    locks: async () => new MemoryLockProvider({ storage }),
    cache: async (options) => new MemoryCacheProvider({ ...options, storage }),
    circuitBreaker: async () => new MemoryCircuitBreakerStore({ storage }),
    checkpoints: async (options) => new MemoryCheckpointStore({ storage, ...options }),
    idempotency: async () => new MemoryIdempotencyStore({ storage }),
    process: async () => new MemoryProcessBackend({ storage }),
  };
}

type Variant = (storage: MemoryStorage) => Partial<ConformanceContext>;

/** A SQL LIKE built without escaping: `_` and `%` act as wildcards. */
function sloppyGlob(pattern: string): RegExp {
  let source = '';
  for (const char of pattern) {
    if (char === '*' || char === '%') source += '[\\s\\S]*';
    else if (char === '?' || char === '_') source += '[\\s\\S]';
    else source += char.replace(/[\\^$.+()[\]{}|/]/g, '\\$&');
  }
  return new RegExp(`^${source}$`, 'u');
}

export const BROKEN_VARIANTS = {
  /** Leases never run out: the lock's clock stands still. */
  'lock-ignores-expiry': (storage) => ({
    locks: async () => new MemoryLockProvider({ storage, clock: { now: () => 0 } }),
  }),

  /** Patterns go to an unescaped LIKE: `_` matches any character, `%` any run. */
  'glob-unescaped-underscore': (storage) => ({
    kv: async () => {
      const kv = new MemoryKeyValueStore({ storage });
      return override<KeyValueStore>(kv, {
        keys: async (pattern = '*') => (await kv.keys()).filter((key) => sloppyGlob(pattern).test(key)),
      });
    },
  }),

  /** The fence counts from 1 again after every release. */
  'fence-resets-on-release': (storage) => {
    const base = new Map<string, number>();
    const highest = new Map<string, number>();
    const forget = (key: string) => base.set(key, highest.get(key) ?? 0);
    return {
      locks: async () => {
        const locks = new MemoryLockProvider({ storage });
        const wrap = (handle: LockHandle | null): LockHandle | null => {
          if (handle === null) return null;
          highest.set(handle.key, Math.max(highest.get(handle.key) ?? 0, handle.fence));
          return override(handle, {
            fence: handle.fence - (base.get(handle.key) ?? 0),
            release: async () => {
              await handle.release();
              forget(handle.key);
            },
          });
        };
        return override<LockProvider>(locks, {
          acquire: async (...args: Parameters<LockProvider['acquire']>) => wrap(await locks.acquire(...args)),
          release: async (key: string, owner: string) => {
            const released = await locks.release(key, owner);
            if (released) forget(key);
            return released;
          },
          forceRelease: async (key: string) => {
            await locks.forceRelease(key);
            forget(key);
          },
        });
      },
    };
  },

  /** The second close() fails instead of being a no-op. */
  'close-not-idempotent': (storage) => ({
    kv: async () => {
      const kv = new MemoryKeyValueStore({ storage });
      let closed = false;
      return override<KeyValueStore>(kv, {
        close: async () => {
          if (closed) throw new Error('already closed');
          closed = true;
          await kv.close();
        },
      });
    },
  }),

  /** Expiry computed with the caller's Date.now() instead of the store's own clock. */
  'ttl-on-client-clock': () => memoryContext(createMemoryStorage({ clock: { now: () => Date.now() } })),

  /** compareAndSet writes whatever the version. */
  'cas-ignores-version': (storage) => ({
    kv: async () => {
      const kv = new MemoryKeyValueStore({ storage });
      return override<KeyValueStore>(kv, {
        compareAndSet: async (key: string, value: string, _expected: number | null, options?: { ttl?: number }) => {
          await kv.set(key, value, options);
          return (await kv.getEntry(key))!.version;
        },
      });
    },
  }),

  /** clear() wipes every cache on the storage, not just this prefix. */
  'cache-clear-ignores-prefix': (storage) => ({
    cache: async (options) => {
      const cache = new MemoryCacheProvider({ ...options, storage });
      return override<CacheProvider>(cache, {
        clear: () => new MemoryCacheProvider({ storage }).clear(),
      });
    },
  }),

  /** recordFailure reads, then writes in a second step: concurrent failures overwrite each other. */
  'circuit-read-modify-write': (storage) => ({
    circuitBreaker: async () => {
      const breaker = new MemoryCircuitBreakerStore({ storage });
      return override<CircuitBreakerStore>(breaker, {
        recordFailure: async (key: string, maxFailures: number) => {
          const current = await breaker.getState(key);
          const failureCount = (current?.failureCount ?? 0) + 1;
          const state = failureCount >= maxFailures ? 'open' : 'closed';
          await breaker.setState(key, { ...current, state, failureCount, lastFailureTime: Date.now() });
          return failureCount;
        },
      });
    },
  }),

  /** reserve checks for a completed result, then claims blindly, taking over claims in flight. */
  'idempotency-reserve-ignores-claims': (storage) => ({
    idempotency: async () => {
      const store = new MemoryIdempotencyStore({ storage });
      return override<IdempotencyStore>(store, {
        reserve: async (key: string, ttl: number) => {
          const completed = await store.get(key);
          if (completed) return { status: 'completed', ...completed };
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 5)); // work between check and act
          await store.delete(key);
          return store.reserve(key, ttl);
        },
      });
    },
  }),

  /** A duplicate (taskId, sequence) is silently dropped instead of reported. */
  'checkpoint-duplicates-ignored': (storage) => ({
    checkpoints: async () => {
      const store = new MemoryCheckpointStore({ storage });
      return override<CheckpointStore>(store, {
        save: async (checkpoint: Parameters<CheckpointStore['save']>[0]) => {
          try {
            await store.save(checkpoint);
          } catch (error) {
            if (!isStowageError(error, 'E_VERSION_CONFLICT')) throw error;
          }
        },
      });
    },
  }),

  /**
   * transition compares the state but not the version (an UPDATE … WHERE state = $from that
   * forgot the version): a worker that read an earlier stay in the same state still applies.
   */
  'process-transition-ignores-version': (storage) => ({
    process: async () => {
      const backend = new MemoryProcessBackend({ storage });
      return override<ProcessBackend>(backend, {
        transition: async (request: TransitionRequest) => {
          const current = await backend.getItem(request.process, request.itemId);
          const sameState = current !== null && current.state === request.from;
          return backend.transition(sameState ? { ...request, version: current.version } : request);
        },
      });
    },
  }),

  /**
   * Versions count writes since the key was created and start over at 1 after a delete (the
   * old rule): a compare-and-set based on a read from before the delete succeeds on the
   * re-created key (ABA).
   */
  'versions-restart-after-delete': (storage) => ({
    kv: async () => {
      const kv = new MemoryKeyValueStore({ storage });
      const writes = new Map<string, number>();
      const wrote = (key: string) => writes.set(key, (writes.get(key) ?? 0) + 1).get(key)!;
      return override<KeyValueStore>(kv, {
        set: async (key: string, value: string, options?: { ttl?: number }) => {
          await kv.set(key, value, options);
          wrote(key);
        },
        setMany: async (entries: readonly { key: string; value: string; ttl?: number }[]) => {
          await kv.setMany(entries);
          for (const key of new Set(entries.map((entry) => entry.key))) wrote(key);
        },
        delete: async (key: string) => {
          writes.delete(key);
          return kv.delete(key);
        },
        getEntry: async (key: string) => {
          const entry = await kv.getEntry(key);
          return entry && { ...entry, version: writes.get(key) ?? 1 };
        },
        compareAndSet: async (key: string, value: string, expected: number | null, options?: { ttl?: number }) => {
          const live = await kv.getEntry(key);
          if ((live === null ? null : (writes.get(key) ?? 1)) !== expected) {
            throw new StowageError('E_VERSION_CONFLICT', `"${key}" is not at version ${expected}`);
          }
          if (live === null) writes.delete(key);
          await kv.set(key, value, options);
          return wrote(key);
        },
      });
    },
  }),

  /** A cache prefix is pasted in front of the key in one shared table: `users:` sees `users:admin:`'s entries. */
  'cache-prefix-concatenated': (storage) => ({
    cache: async (options) => {
      const prefix = options.prefix ?? '';
      const shared = new MemoryCacheProvider({ ...options, prefix: '', storage });
      return override<CacheProvider>(shared, {
        get: (key: string) => shared.get(prefix + key),
        set: (key: string, value: unknown, ttl?: number) => shared.set(prefix + key, value, ttl),
        has: (key: string) => shared.has(prefix + key),
        delete: (key: string) => shared.delete(prefix + key),
        keys: async (pattern = '*') => (await shared.keys(escapeGlob(prefix) + pattern)).map((key) => key.slice(prefix.length)),
        clear: async () => {
          for (const key of await shared.keys(`${escapeGlob(prefix)}*`)) await shared.delete(key);
        },
      });
    },
  }),

  /** A snapshot store prefix is pasted in front of the id: prefix `t1` loads tenant `t11`'s `:invoice` as `1:invoice`. */
  'snapshot-prefix-concatenated': (storage) => ({
    snapshots: async ({ prefix = '' }) => {
      const shared = memory<JsonObject>({ storage });
      return override<SnapshotStore<JsonObject>>(shared, {
        save: (id: string, snapshot: JsonObject, options?: SnapshotSaveOptions) => shared.save(prefix + id, snapshot, options),
        load: (id: string) => shared.load(prefix + id),
        loadVersioned: (id: string) => shared.loadVersioned(prefix + id),
        delete: (id: string) => shared.delete(prefix + id),
        list: async (options?: { prefix?: string; limit?: number }) =>
          (await shared.list({ ...options, prefix: prefix + (options?.prefix ?? '') })).map((item) => ({ ...item, id: item.id.slice(prefix.length) })),
      });
    },
  }),

  /** Snapshots must be strict JSON: a void step's `{ ok: true, value: undefined }` is refused, which awaitly swallows. */
  'snapshot-strict-json': (storage) => ({
    snapshots: async ({ prefix }) => {
      const store = memory<JsonObject>({ storage, prefix });
      return override<SnapshotStore<JsonObject>>(store, {
        save: async (id: string, snapshot: JsonObject, options?: SnapshotSaveOptions) => {
          assertJsonValue(isResumeState(snapshot) ? serializeResumeState(snapshot) : snapshot, 'snapshot');
          return store.save(id, snapshot, options);
        },
      });
    },
  }),

  /** acquire never hears the caller's signal: an aborted waiter still takes the lock later. */
  'acquire-ignores-abort': (storage) => ({
    locks: async () => {
      const locks = new MemoryLockProvider({ storage });
      return override<LockProvider>(locks, {
        acquire: (key: string, ttl: number, options?: string | AcquireOptions) =>
          locks.acquire(key, ttl, typeof options === 'object' ? { ...options, signal: undefined } : options),
      });
    },
  }),

  /** close() resolves at once and abandons the calls in flight: they never settle. */
  'close-abandons-calls': (storage) => ({
    kv: async () => {
      const kv = new MemoryKeyValueStore({ storage });
      let closed = false;
      return override<KeyValueStore>(kv, {
        set: async (key: string, value: string, options?: { ttl?: number }) => {
          await new Promise((resolve) => setTimeout(resolve, 5));
          if (closed) return new Promise<void>(() => {});
          return kv.set(key, value, options);
        },
        close: async () => {
          closed = true;
          await kv.close();
        },
      });
    },
  }),
} satisfies Record<string, Variant>;

export type BrokenVariantName = keyof typeof BROKEN_VARIANTS;

export function brokenAdapter(variant: BrokenVariantName): ConformanceAdapter {
  return {
    name: `broken:${variant}`,
    createContext() {
      const storage = createMemoryStorage();
      return { ...memoryContext(storage), ...BROKEN_VARIANTS[variant](storage) };
    },
  };
}
