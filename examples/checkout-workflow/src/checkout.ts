/**
 * The checkout workflow of the seeds: fetch the user, then create the order, each a durable
 * step. awaitly's `durable.run` saves a snapshot to the store after every keyed step, so a
 * run that dies between the two steps resumes at `create-order` and never fetches the user
 * again. Completed workflows are removed from the store.
 */
import { ok } from 'awaitly';
import { durable, type DurableWorkflowEvent, type SnapshotStore } from 'awaitly/durable';
import type { SideEffects } from './side-effects.ts';

export interface User {
  id: string;
  name: string;
}

export interface Order {
  orderId: string;
  userId: string;
  total: number;
}

/** How long a worker's lease on a workflow id lasts unless renewed (awaitly renews it every third). */
export const LEASE_MS = 2_000;

/** The step functions. Each records that it ran, then does its (pretend) work. */
export interface StepHooks {
  /** Runs inside fetchUser, after its side effect: the race scene holds the winner here. */
  whileFetching?: () => Promise<void>;
}

export function checkoutSteps(workflowId: string, sideEffects: SideEffects, hooks: StepHooks = {}) {
  return {
    fetchUser: async (id: string) => {
      await sideEffects.record(workflowId, 'fetchUser');
      await hooks.whileFetching?.();
      return ok<User>({ id, name: 'Ada Lovelace' });
    },
    createOrder: async (user: User) => {
      await sideEffects.record(workflowId, 'createOrder');
      return ok<Order>({ orderId: `order-${workflowId}`, userId: user.id, total: 42 });
    },
  };
}

export function runCheckout(
  workflowId: string,
  store: SnapshotStore,
  steps: ReturnType<typeof checkoutSteps>,
  onEvent?: (event: DurableWorkflowEvent<unknown>) => void,
) {
  return durable.run(
    steps,
    async ({ step, deps }) => {
      const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
      const order = await step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
      return order;
    },
    { id: workflowId, store, lockTtlMs: LEASE_MS, onEvent },
  );
}
