import type { ConformanceAdapter } from '../src/conformance/types.js';
import {
  MemoryCacheProvider,
  MemoryCheckpointStore,
  MemoryCircuitBreakerStore,
  MemoryIdempotencyStore,
  MemoryKeyValueStore,
  MemoryLockProvider,
  createMemoryStorage,
  memory,
} from '../src/memory/index.js';

/** The in-memory adapter as the conformance suite sees it: one fresh storage per test. */
export const memoryAdapter: ConformanceAdapter = {
  name: 'memory',
  createContext() {
    const storage = createMemoryStorage();
    return {
      kv: async () => new MemoryKeyValueStore({ storage }),
      snapshots: async ({ lock }) => (lock ? memory({ storage, lock: true }) : memory({ storage })),
      locks: async () => new MemoryLockProvider({ storage }),
      cache: async (options) => new MemoryCacheProvider({ ...options, storage }),
      circuitBreaker: async () => new MemoryCircuitBreakerStore({ storage }),
      checkpoints: async () => new MemoryCheckpointStore({ storage }),
      idempotency: async () => new MemoryIdempotencyStore({ storage }),
    };
  },
};
