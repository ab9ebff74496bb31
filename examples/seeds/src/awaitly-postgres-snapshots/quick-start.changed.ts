// awaitly-postgres docs (snapshot store), "Quick Start", with the one line `tsc --strict` needs
// changed: `loadResumeState` is typed as what `workflow.run` takes (`load` is typed as the
// store's snapshot type, the WorkflowSnapshot durable.run needs; see the README).
import { postgres } from '@stowage/postgres';
import { createWorkflow, createResumeStateCollector } from 'awaitly/workflow';
import { createOrder, fetchUser } from '../deps.ts';

// One-liner setup
const store = postgres('postgresql://localhost/mydb');
const collector = createResumeStateCollector();

const workflow = createWorkflow('workflow', { fetchUser, createOrder }, { onEvent: collector.handleEvent });

await workflow.run(async ({ step, deps }) => {
  const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
  const order = await step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
  return order;
});

await store.save('checkout-123', collector.getResumeState());

// Later: restore + resume
const savedState = await store.loadResumeState('checkout-123'); // changed: was store.load('checkout-123')
await workflow.run(async ({ step, deps }) => {
  const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
  const order = await step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
  return order;
}, { resumeState: savedState ?? undefined });

export { store, collector, workflow, savedState };
