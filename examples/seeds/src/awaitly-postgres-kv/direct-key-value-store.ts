// awaitly-postgres docs (key-value store), "Direct KeyValueStore Access": verbatim apart from the imports (and the export).
// awaitly 1.35.0's 'awaitly/persistence' has no createStatePersistence; stowage's has the same signature.
import { PostgresKeyValueStore } from '@stowage/postgres';
import { createStatePersistence } from '@stowage/core';

const store = new PostgresKeyValueStore({
  connectionString: process.env.DATABASE_URL,
});

const persistence = createStatePersistence(store, 'custom:prefix:');

export { store, persistence };
