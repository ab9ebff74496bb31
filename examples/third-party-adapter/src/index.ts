/**
 * A stowage adapter on Node's built-in SQLite (`node:sqlite`), written the way a third party
 * would write one: the contracts and shared rules (keys, globs, errors, lock handles,
 * withLock) come from `@stowage/core`; this package adds only the SQL.
 */
export { SQLITE_CAPABILITIES } from './capabilities.ts';
export { SCHEMA, type SqliteStoreOptions } from './database.ts';
export { SqliteKeyValueStore } from './kv.ts';
export { SqliteLockProvider } from './locks.ts';
