// awaitly-mongo docs, "Using Existing Client": verbatim apart from the imports (and the export).
import { MongoClient } from 'mongodb';
import { createMongoPersistence } from '@stowage/mongo';

const client = new MongoClient(process.env.MONGODB_URI);
await client.connect();

const store = await createMongoPersistence({
  existingClient: client,
  database: 'myapp',
});

export { client, store };
