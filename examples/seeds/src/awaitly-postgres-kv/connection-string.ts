// awaitly-postgres docs (key-value store), "Connection String": verbatim apart from the import (and the export).
// The URL's user, password and database are placeholders: the tests expect the connection to be refused.
import { createPostgresPersistence } from '@stowage/postgres';

const store = await createPostgresPersistence({
  connectionString: 'postgresql://user:password@localhost:5432/dbname',
});

export { store };
