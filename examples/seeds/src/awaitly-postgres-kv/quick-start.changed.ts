// awaitly-postgres docs (key-value store), "Quick Start", changed for awaitly 1.35.0's
// durable.run: the workflow function takes `{ step, deps }`, and each step is named (the three
// lines marked "changed").
import { createPostgresPersistence } from '@stowage/postgres';
import { durable } from 'awaitly/durable';
import { createOrder, fetchUser } from '../deps.ts';

const store = await createPostgresPersistence({
  connectionString: process.env.DATABASE_URL,
});

const result = await durable.run(
  { fetchUser, createOrder },
  async ({ step, deps: { fetchUser, createOrder } }) => { // changed
    const user = await step('fetchUser', () => fetchUser('123'), { key: 'fetch-user' }); // changed
    const order = await step('createOrder', () => createOrder(user), { key: 'create-order' }); // changed
    return order;
  },
  {
    id: 'checkout-123',
    store,
  }
);

export { store, result };
