// awaitly-mongo docs, "Using Existing Database": verbatim apart from the imports (and the export).
import { MongoClient } from 'mongodb';
import { createMongoPersistence } from '@stowage/mongo';

const client = new MongoClient(process.env.MONGODB_URI);
await client.connect();
const db = client.db('myapp');

const store = await createMongoPersistence({
  existingDb: db,
  collection: 'workflow_state',
});

export { client, db, store };
