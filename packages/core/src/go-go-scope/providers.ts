import type { StowageResource } from '../contracts/common.js';
import type { CacheProvider } from '../contracts/cache.js';
import type { Checkpoint, CheckpointStore } from '../contracts/checkpoints.js';
import type { CircuitBreakerStore } from '../contracts/circuit-breaker.js';
import type { IdempotencyStore } from '../contracts/idempotency.js';
import type { LockProvider } from '../contracts/locks.js';
import { assertOptionsObject, assertValidPrefix } from '../adapter/options.js';
import { richCodec, type Codec } from '../json.js';
import { fitKey } from '../keys.js';
import type {
  GoGoScopeCacheProvider,
  GoGoScopeCheckpointProvider,
  GoGoScopeCircuitBreakerProvider,
  GoGoScopeIdempotencyProvider,
  GoGoScopeLockProvider,
  GoGoScopeOptions,
  GoGoScopePersistence,
  GoGoScopeStores,
} from './types.js';

/**
 * Creates each store of a {@link GoGoScopePersistence}. The layer passes the options go-go-scope
 * needs (decided here, once, for every backend), and the maker adds where the data lives.
 */
export interface GoGoScopeStoreMakers {
  lock(): LockProvider;
  circuitBreaker(): CircuitBreakerStore;
  /** `prefix` is the `keyPrefix`; `codec` keeps Dates, `undefined` inside objects and arrays, BigInts… */
  cache(options: { prefix: string; codec: Codec }): CacheProvider;
  /** go-go-scope stores its task result tuple `[undefined, value]`: strict JSON would refuse it. */
  idempotency(options: { codec: Codec }): IdempotencyStore;
  /** go-go-scope's interval auto-save saves the same checkpoint again: it must replace, not conflict. */
  checkpoint(options: { codec: Codec; onDuplicate: 'replace' }): CheckpointStore<unknown>;
}

export interface GoGoScopeProvidersOptions extends GoGoScopeOptions {
  /** Runs after every store closed: the backend factories end the connection they opened here. */
  afterClose?: () => Promise<void>;
}

/**
 * go-go-scope's persistence providers on stowage stores: each slot delegates to a store made
 * by `makers`, with only what go-go-scope relies on from its own adapters added on top:
 *
 * - checkpoints: a missing one is `undefined` (not `null`), `save` takes any data type and
 *   replaces a checkpoint saved before under the same id or `(taskId, sequence)`;
 * - cache and idempotency: a ttl of 0 means no expiry; keys longer than stowage's 1024 UTF-8
 *   bytes (URLs as keys) are stored under a fixed-length form (see {@link fitKey});
 * - cache, idempotency and lock: a fractional ttl (`1000.5`, computed) is rounded up to whole
 *   milliseconds;
 * - cache values, idempotency results and checkpoint data go through `richCodec`, so the
 *   `[undefined, value]` tuple go-go-scope stores as a task's result, and Dates, come back as
 *   they were;
 * - `keyPrefix` in front of lock, circuit-breaker and idempotency keys, and as the cache's
 *   namespace.
 *
 * Everything else (validation, expiry on the store clock, fencing, atomic counters) is the
 * stores' own, and the stores stay reachable with their full contracts as `stores`.
 */
export function goGoScopeProviders(makers: GoGoScopeStoreMakers, options: GoGoScopeProvidersOptions = {}): GoGoScopePersistence {
  assertOptionsObject(options);
  const { keyPrefix = '', afterClose } = options;
  const stores = makeStores(makers, keyPrefix, afterClose);
  let connected = false;
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= closeAll(stores, afterClose).finally(() => void (connected = false));
    return closing;
  };
  return {
    lock: lockProvider(stores.lock, keyPrefix),
    circuitBreaker: circuitBreakerProvider(stores.circuitBreaker, keyPrefix),
    cache: cacheProvider(stores.cache),
    idempotency: idempotencyProvider(stores.idempotency, keyPrefix),
    checkpoint: checkpointProvider(stores.checkpoint),
    stores,
    async connect() {
      // Every store creates its schema now (`ready()`, part of every contract).
      await Promise.all(Object.values(stores).map((store: StowageResource) => store.ready()));
      connected = closing === undefined;
    },
    isConnected: () => connected,
    disconnect: close,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * Every store, or none: when the key prefix is refused or a maker throws, the stores made so
 * far are closed again, and `afterClose` frees the connection opened for them.
 */
function makeStores(makers: GoGoScopeStoreMakers, prefix: string, afterClose: (() => Promise<void>) | undefined): GoGoScopeStores {
  const made: Partial<GoGoScopeStores> = {};
  try {
    assertValidPrefix(prefix, 'keyPrefix');
    made.lock = makers.lock();
    made.circuitBreaker = makers.circuitBreaker();
    made.cache = makers.cache({ prefix, codec: richCodec });
    made.idempotency = makers.idempotency({ codec: richCodec });
    made.checkpoint = makers.checkpoint({ codec: richCodec, onDuplicate: 'replace' });
    return made as GoGoScopeStores;
  } catch (error) {
    void closeAll(made, afterClose).catch(() => undefined);
    throw error;
  }
}

async function closeAll(stores: Partial<GoGoScopeStores>, afterClose: (() => Promise<void>) | undefined): Promise<void> {
  try {
    await Promise.all(Object.values(stores).map((store) => store.close()));
  } finally {
    await afterClose?.();
  }
}

/**
 * `keyPrefix` + key. A key that is not a string reaches the store as it is, so that it is
 * refused there (`E_INVALID_KEY`) instead of becoming the text "undefined".
 */
function prefixer(keyPrefix: string): (key: string) => string {
  return (key) => (typeof key === 'string' ? keyPrefix + key : key);
}

/**
 * go-go-scope's adapters take fractional ttls (a computed `1000.5`); stowage's are whole
 * milliseconds, so they are rounded up. Anything else reaches the store as it is, to be
 * refused there.
 */
function wholeMs(ttl: number): number {
  return typeof ttl === 'number' && ttl > 0 && Number.isFinite(ttl) ? Math.ceil(ttl) : ttl;
}

/** go-go-scope's adapters store a falsy ttl (0) without expiry; for stowage that is "no ttl given". */
function ttlOf(ttl: number | undefined): number | undefined {
  return ttl === 0 || ttl === undefined ? undefined : wholeMs(ttl);
}

function lockProvider(locks: LockProvider, keyPrefix: string): GoGoScopeLockProvider {
  const key = prefixer(keyPrefix);
  return {
    acquire: (name, ttl, owner) => locks.acquire(key(name), wholeMs(ttl), owner),
    extend: (name, ttl, owner) => locks.extend(key(name), wholeMs(ttl), owner),
    forceRelease: (name) => locks.forceRelease(key(name)),
  };
}

function circuitBreakerProvider(circuits: CircuitBreakerStore, keyPrefix: string): GoGoScopeCircuitBreakerProvider {
  const key = prefixer(keyPrefix);
  return {
    getState: (name) => circuits.getState(key(name)),
    setState: (name, state) => circuits.setState(key(name), state),
    recordFailure: (name, maxFailures, options) => circuits.recordFailure(key(name), maxFailures, options),
    recordSuccess: (name) => circuits.recordSuccess(key(name)),
  };
}

/** The cache's prefix is its own namespace (set by the maker), so keys are only fitted. */
function cacheProvider(cache: CacheProvider): GoGoScopeCacheProvider {
  return {
    get: (key) => cache.get(fitKey(key)),
    set: (key, value, ttl) => cache.set(fitKey(key), value, ttlOf(ttl)),
    delete: (key) => cache.delete(fitKey(key)),
    has: (key) => cache.has(fitKey(key)),
    clear: () => cache.clear(),
    keys: (pattern) => cache.keys(pattern),
  };
}

function idempotencyProvider(results: IdempotencyStore, keyPrefix: string): GoGoScopeIdempotencyProvider {
  const prefixed = prefixer(keyPrefix);
  const key = (name: string) => fitKey(prefixed(name));
  return {
    get: (name) => results.get(key(name)),
    set: (name, value, ttl) => results.set(key(name), value, ttlOf(ttl)),
    delete: (name) => results.delete(key(name)),
  };
}

function checkpointProvider(checkpoints: CheckpointStore<unknown>): GoGoScopeCheckpointProvider {
  return {
    save: (checkpoint) => checkpoints.save(checkpoint),
    // go-go-scope's generic methods let the caller name the data type; the store holds what was saved.
    loadLatest: async <T>(taskId: string) => ((await checkpoints.loadLatest(taskId)) ?? undefined) as Checkpoint<T> | undefined,
    load: async <T>(checkpointId: string) => ((await checkpoints.load(checkpointId)) ?? undefined) as Checkpoint<T> | undefined,
    list: (taskId) => checkpoints.list(taskId),
    cleanup: (taskId, keepCount) => checkpoints.cleanup(taskId, keepCount),
    deleteAll: (taskId) => checkpoints.deleteAll(taskId),
  };
}
