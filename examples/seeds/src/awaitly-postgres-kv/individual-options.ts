// awaitly-postgres docs (key-value store), "Individual Options": verbatim apart from the import (and the export).
// Needs a server on localhost:5432 with a database "myapp" (the tests create it on the PostgreSQL server).
import { createPostgresPersistence } from '@stowage/postgres';

const store = await createPostgresPersistence({
  host: 'localhost',
  port: 5432,
  database: 'myapp',
  user: 'postgres',
  password: 'password',
  tableName: 'custom_workflow_state', // optional, default: 'awaitly_workflow_state'
  prefix: 'myapp:workflow:', // optional, default: 'workflow:state:'
});

export { store };
