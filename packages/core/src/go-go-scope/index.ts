/**
 * `@stowage/core/go-go-scope`: stowage stores as go-go-scope's persistence providers
 * (`scope({ persistence })`). `goGoScopeProviders` builds them on any stores;
 * `goGoScopePersistence` here keeps them in memory, and `@stowage/postgres` and
 * `@stowage/mongo` each export a `goGoScopePersistence` of their own on one connection.
 */
export { goGoScopeProviders, type GoGoScopeProvidersOptions, type GoGoScopeStoreMakers } from './providers.js';
export { goGoScopePersistence } from './memory.js';
export {
  GO_GO_SCOPE_NAMES,
  type GoGoScopeCacheProvider,
  type GoGoScopeCheckpointProvider,
  type GoGoScopeCircuitBreakerProvider,
  type GoGoScopeIdempotencyProvider,
  type GoGoScopeLockProvider,
  type GoGoScopeNames,
  type GoGoScopeOptions,
  type GoGoScopePersistence,
  type GoGoScopeStores,
} from './types.js';
