// awaitly-postgres docs (key-value store), "Using Existing Pool": verbatim apart from the imports (and the export).
import { Pool } from 'pg';
import { createPostgresPersistence } from '@stowage/postgres';

const pool = new Pool({ connectionString: process.env.DATABASE_URL });
const store = await createPostgresPersistence({
  existingPool: pool,
});

export { pool, store };
