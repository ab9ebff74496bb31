// awaitly-postgres docs (key-value store), "Quick Start": verbatim apart from the imports (and the export).
// Written for an older awaitly: with awaitly 1.35.0 durable.run resolves to an error (see the README).
import { createPostgresPersistence } from '@stowage/postgres';
import { durable } from 'awaitly/durable';
import { createOrder, fetchUser } from '../deps.ts';

const store = await createPostgresPersistence({
  connectionString: process.env.DATABASE_URL,
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
