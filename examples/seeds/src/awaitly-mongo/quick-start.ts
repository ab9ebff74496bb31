// awaitly-mongo docs, "Quick Start": verbatim apart from the imports (and the export at the end).
// Written for an older awaitly: with awaitly 1.35.0 durable.run resolves to an error (see the README).
import { createMongoPersistence } from '@stowage/mongo';
import { durable } from 'awaitly/durable';
import { createOrder, fetchUser } from '../deps.ts';

const store = await createMongoPersistence({
  connectionString: process.env.MONGODB_URI,
});

const result = await durable.run(
  { fetchUser, createOrder },
  async (step, { fetchUser, createOrder }) => {
    const user = await step(() => fetchUser('123'), { key: 'fetch-user' });
    const order = await step(() => createOrder(user), { key: 'create-order' });
    return order;
  },
  {
    id: 'checkout-123',
    store,
  }
);

export { store, result };
