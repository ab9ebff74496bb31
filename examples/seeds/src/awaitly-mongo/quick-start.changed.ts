// awaitly-mongo docs, "Quick Start", changed for awaitly 1.35.0's durable.run: the workflow
// function takes `{ step, deps }`, and each step is named (the three lines marked "changed").
import { createMongoPersistence } from '@stowage/mongo';
import { durable } from 'awaitly/durable';
import { createOrder, fetchUser } from '../deps.ts';

const store = await createMongoPersistence({
  connectionString: process.env.MONGODB_URI,
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
