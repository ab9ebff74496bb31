// awaitly-postgres docs (key-value store), "Production Considerations > Connection Pooling":
// verbatim apart from the import (and the export).
import { createPostgresPersistence } from '@stowage/postgres';

const store = await createPostgresPersistence({
  connectionString: process.env.DATABASE_URL,
  pool: {
    max: 20, // Maximum pool size
    min: 5,  // Minimum pool size
    idleTimeoutMillis: 30000,
  },
});

export { store };
