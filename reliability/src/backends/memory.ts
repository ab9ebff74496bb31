import {
  createMemoryStorage,
  MemoryCacheProvider,
  MemoryIdempotencyStore,
  MemoryKeyValueStore,
  MemoryLockProvider,
  MemorySnapshotStore,
} from '@stowage/core/memory';
import type { JsonObject } from '@stowage/core';
import { MemoryGuardStore } from '../guard.ts';
import type { Backend, BackendTarget, OpenOptions } from './types.ts';

/**
 * The in-memory adapter. Every object opened here shares one storage, the way processes share
 * a database; "workers" are concurrent async tasks in this process, never OS processes.
 */
export function memoryBackend(target: BackendTarget): Backend {
  const storage = createMemoryStorage();
  const guard = new MemoryGuardStore();
  return {
    target,
    crossProcess: false,
    address: null,
    kv: async () => new MemoryKeyValueStore({ storage }),
    snapshots: async (options?: OpenOptions) => new MemorySnapshotStore<JsonObject>({ storage, ...(options?.prefix !== undefined ? { prefix: options.prefix } : {}) }),
    locks: async () => new MemoryLockProvider({ storage }),
    cache: async (options?: OpenOptions) => new MemoryCacheProvider({ storage, prefix: options?.prefix ?? 'cache:' }),
    idempotency: async () => new MemoryIdempotencyStore({ storage }),
    guard: async () => guard,
    sharedConnection: async () => null,
    cleanup: async () => {},
    close: async () => {},
  };
}
