// awaitly-mongo docs, "Direct KeyValueStore Access": verbatim apart from the imports (and the export).
// awaitly 1.35.0's 'awaitly/persistence' has no createStatePersistence; stowage's has the same signature.
import { MongoKeyValueStore } from '@stowage/mongo';
import { createStatePersistence } from '@stowage/core';

const store = new MongoKeyValueStore({
  connectionString: process.env.MONGODB_URI,
});

const persistence = createStatePersistence(store, 'custom:prefix:');

export { store, persistence };
