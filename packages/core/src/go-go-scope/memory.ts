import { MemoryCacheProvider } from '../memory/cache.js';
import { MemoryCheckpointStore } from '../memory/checkpoints.js';
import { MemoryCircuitBreakerStore } from '../memory/circuit-breaker.js';
import { MemoryIdempotencyStore } from '../memory/idempotency.js';
import { MemoryLockProvider } from '../memory/locks.js';
import { resolveMemoryOptions, type MemoryOptions } from '../memory/storage.js';
import { assertOptionsObject } from '../adapter/options.js';
import { goGoScopeProviders } from './providers.js';
import type { GoGoScopeOptions, GoGoScopePersistence } from './types.js';

/**
 * go-go-scope's persistence providers in process memory (tests, single-process apps): every
 * store on one storage, `options.storage` if given, so that two of them on one storage behave
 * like two processes on one database.
 *
 * ```ts
 * await using persistence = goGoScopePersistence();
 * await using s = scope({ persistence });
 * ```
 */
export function goGoScopePersistence(options: MemoryOptions = {}, goGoScope: GoGoScopeOptions = {}): GoGoScopePersistence {
  assertOptionsObject(goGoScope, 'go-go-scope options');
  const memory = resolveMemoryOptions(options); // validated; one storage for every store
  return goGoScopeProviders(
    {
      lock: () => new MemoryLockProvider(memory),
      circuitBreaker: () => new MemoryCircuitBreakerStore(memory),
      cache: (needs) => new MemoryCacheProvider({ ...memory, ...needs }),
      idempotency: (needs) => new MemoryIdempotencyStore({ ...memory, ...needs }),
      checkpoint: (needs) => new MemoryCheckpointStore<unknown>({ ...memory, ...needs }),
    },
    goGoScope,
  );
}
