// awaitly-postgres docs (snapshot store), "Object Options": verbatim apart from the import (and the export).
import { postgres } from '@stowage/postgres';

const store = postgres({
  url: 'postgresql://localhost/mydb',
  table: 'my_workflow_snapshots', // Default: 'awaitly_snapshots'
  prefix: 'orders:', // Default: ''
  autoCreateTable: true, // Default: true
  lock: { lockTableName: 'my_workflow_locks' }, // Optional: cross-process locking
});

export { store };
