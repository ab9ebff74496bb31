// awaitly-mongo docs, "Client Options": verbatim apart from the import (and the export).
import { createMongoPersistence } from '@stowage/mongo';

const store = await createMongoPersistence({
  connectionString: process.env.MONGODB_URI,
  clientOptions: {
    maxPoolSize: 10,
    serverSelectionTimeoutMS: 5000,
  },
});

export { store };
