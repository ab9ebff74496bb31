// awaitly-mongo docs, "Production Considerations > Connection Pooling": verbatim apart from the import (and the export).
import { createMongoPersistence } from '@stowage/mongo';

const store = await createMongoPersistence({
  connectionString: process.env.MONGODB_URI,
  clientOptions: {
    maxPoolSize: 50,
    minPoolSize: 5,
    maxIdleTimeMS: 30000,
  },
});

export { store };
