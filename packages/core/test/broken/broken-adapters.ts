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
import type { LockHandle, LockProvider } from '../../src/contracts/locks.js';
import type { ConformanceAdapter, ConformanceContext } from '../../src/conformance/types.js';
import { isStowageError } from '../../src/errors.js';
import {
  MemoryCacheProvider,
  MemoryCheckpointStore,
  MemoryCircuitBreakerStore,
  MemoryIdempotencyStore,
  MemoryKeyValueStore,
  MemoryLockProvider,
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

/** The honest memory adapter's factories on one storage, for a variant to break one of. */
function memoryContext(storage: MemoryStorage): Required<Omit<ConformanceContext, 'cleanup' | 'process'>> {
  return {
    kv: async () => new MemoryKeyValueStore({ storage }),
    snapshots: async ({ lock }) => (lock ? memory({ storage, lock: true }) : memory({ storage })),
    locks: async () => new MemoryLockProvider({ storage }),
    cache: async (options) => new MemoryCacheProvider({ ...options, storage }),
    circuitBreaker: async () => new MemoryCircuitBreakerStore({ storage }),
    checkpoints: async () => new MemoryCheckpointStore({ storage }),
    idempotency: async () => new MemoryIdempotencyStore({ storage }),
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
