/**
 * The step functions the samples call without defining them (`fetchUser`, `createOrder`):
 * awaitly steps return a Result. Each call is counted, so a test can tell a step that ran from
 * one that was replayed from the store.
 */
import { ok } from 'awaitly';

export interface User {
  id: string;
  name: string;
}

export const calls = { fetchUser: 0, createOrder: 0 };

export async function fetchUser(id: string) {
  calls.fetchUser++;
  return ok<User>({ id, name: 'Ada' });
}

export async function createOrder(user: User) {
  calls.createOrder++;
  return ok({ orderId: `order-for-${user.id}`, total: 42 });
}
