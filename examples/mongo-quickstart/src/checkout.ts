/**
 * The seeds' checkout workflow on awaitly's `durable.run`: fetch the user, then create the
 * order. The store saves a snapshot after each keyed step, so a run that died in between
 * resumes at `create-order`.
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

/** A worker's lease on a workflow id; awaitly renews it every third while the run goes on. */
export const LEASE_MS = 2_000;

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
      return step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
    },
    { id: workflowId, store, lockTtlMs: LEASE_MS, onEvent },
  );
}
