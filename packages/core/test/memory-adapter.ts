import type { ConformanceAdapter } from '../src/conformance/types.js';
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
} from '../src/memory/index.js';

/**
 * The in-memory adapter as the conformance suite sees it: one fresh storage per test. Its
 * `createContext` is async on purpose: the suite must register every contract (processes
 * included) whatever `createContext` returns.
 */
export const memoryAdapter: ConformanceAdapter = {
  name: 'memory',
  async createContext() {
    const storage = createMemoryStorage();
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
  },
};
