// awaitly-mongo docs, "With Database and Collection Names": verbatim apart from the import (and the export).
import { createMongoPersistence } from '@stowage/mongo';

const store = await createMongoPersistence({
  connectionString: process.env.MONGODB_URI,
  database: 'myapp',
  collection: 'custom_workflow_state', // optional, default: 'workflow_state'
  prefix: 'myapp:workflow:', // optional, default: 'workflow:state:'
});

export { store };
