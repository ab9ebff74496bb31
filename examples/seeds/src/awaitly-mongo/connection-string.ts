// awaitly-mongo docs, "Connection String": verbatim apart from the import (and the export).
// Not run by the tests: nothing listens on localhost:27017 here (see the README).
import { createMongoPersistence } from '@stowage/mongo';

const store = await createMongoPersistence({
  connectionString: 'mongodb://localhost:27017',
});

export { store };
