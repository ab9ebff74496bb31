// awaitly-postgres docs (snapshot store), "With Durable Execution": verbatim apart from the imports (and the export).
import { postgres } from '@stowage/postgres';
import { durable } from 'awaitly/durable';
import { createOrder, fetchUser } from '../deps.ts';

const store = postgres(process.env.DATABASE_URL!);

const result = await durable.run(
  { fetchUser, createOrder },
  async ({ step, deps }) => {
    const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
    const order = await step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
    return order;
  },
  { id: 'checkout-123', store }
);

export { store, result };
