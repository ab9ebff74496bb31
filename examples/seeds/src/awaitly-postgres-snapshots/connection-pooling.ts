// awaitly-postgres docs (snapshot store), "Production Considerations > Connection Pooling":
// verbatim apart from the imports (and the export).
import { Pool } from 'pg';
import { postgres } from '@stowage/postgres';

const pool = new Pool({
  connectionString: process.env.DATABASE_URL,
  max: 20,
  min: 5,
  idleTimeoutMillis: 30000,
});

const store = postgres({ url: process.env.DATABASE_URL!, pool });

export { pool, store };
