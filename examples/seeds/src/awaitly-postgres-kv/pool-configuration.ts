// awaitly-postgres docs (key-value store), "Pool Configuration": verbatim apart from the import (and the export).
import { createPostgresPersistence } from '@stowage/postgres';

const store = await createPostgresPersistence({
  connectionString: process.env.DATABASE_URL,
  pool: {
    max: 20,
    idleTimeoutMillis: 30000,
    connectionTimeoutMillis: 2000,
  },
});

export { store };
