// awaitly-postgres docs (snapshot store), "String Shorthand": verbatim apart from the import (and the export).
// The URL's user, password and database are placeholders: the store is created (it connects on
// first use), and the tests expect its first call to be refused.
import { postgres } from '@stowage/postgres';

const store = postgres('postgresql://user:password@localhost:5432/dbname');

export { store };
