// awaitly-postgres docs (snapshot store), "Bring Your Own Pool": verbatim apart from the imports (and the export).
import { Pool } from 'pg';
import { postgres } from '@stowage/postgres';

const pool = new Pool({ connectionString: process.env.DATABASE_URL });
const store = postgres({
  url: 'postgresql://localhost/mydb',
  pool: pool,
});

export { pool, store };
