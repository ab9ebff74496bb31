/**
 * One worker process: runs the checkout for one workflow id on @stowage/mongo.
 *
 *   MONGODB_URI=... node src/worker.ts <workflow-id> [--crash-after fetch-user] [--wait-for-go] [--hold-fetch-user] [--retry-while-locked]
 */
import { parseArgs } from 'node:util';
import { MongoClient } from 'mongodb';
import { mongo } from '@stowage/mongo';
import { isConcurrentExecution } from 'awaitly/durable';
import { checkoutSteps, runCheckout } from './checkout.ts';
import { DATABASE } from './connection.ts';
import { CRASH_EXIT_CODE, type DemoMessage, type WorkerMessage } from './protocol.ts';
import { SideEffects } from './side-effects.ts';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    'crash-after': { type: 'string' },
    'wait-for-go': { type: 'boolean', default: false },
    'hold-fetch-user': { type: 'boolean', default: false },
    'retry-while-locked': { type: 'boolean', default: false },
  },
});
const workflowId = positionals[0];
const url = process.env.MONGODB_URI;
if (!workflowId || !url) {
  console.error('usage: MONGODB_URI=... node src/worker.ts <workflow-id> [--crash-after <step-key>] [--wait-for-go] [--hold-fetch-user] [--retry-while-locked]');
  process.exit(2);
}

const report = (message: WorkerMessage) => process.send?.(message);
const say = (text: string) => console.log(text);

// One client for the store and the side-effect counters. Passed in, so stowage never closes it.
const client = new MongoClient(url);
// `lock` makes the store an awaitly WorkflowLock: one process at a time runs a workflow id.
const store = mongo({ client, database: DATABASE, lock: {} });
const sideEffects = new SideEffects(client.db(DATABASE));
const nextMessage = (expected: DemoMessage) =>
  new Promise<void>((resolve) => {
    const onMessage = (message: DemoMessage) => {
      if (message !== expected) return;
      process.off('message', onMessage);
      resolve();
    };
    process.on('message', onMessage);
  });

// In the race, the worker that gets the lease holds fetch-user until the demo has seen the
// other worker turned away, so the two runs overlap however slow the machine is.
const steps = checkoutSteps(
  workflowId,
  sideEffects,
  values['hold-fetch-user']
    ? {
        whileFetching: async () => {
          say('  holding fetch-user until the other worker has had its try');
          report({ type: 'holding' });
          await nextMessage('proceed');
        },
      }
    : {},
);

if (values['wait-for-go']) {
  // Start the run the moment the demo says go (processes start slowly on a busy machine).
  const go = nextMessage('go');
  report({ type: 'ready' });
  await go;
}

const deadline = Date.now() + 15_000;
let waitingForLease = false;
say(`running checkout ${workflowId}`);
for (;;) {
  const result = await runCheckout(workflowId, store, steps, (event) => {
    if (waitingForLease) {
      say('  the lease expired: this worker took it over');
      waitingForLease = false;
    }
    if (event.type === 'step_cache_hit') say(`  step ${event.stepKey}: already done in the saved snapshot, not run again`);
    if (event.type === 'step_start') say(`  step ${event.stepKey}: running`);
    if (event.type === 'persist_success') {
      say(`  step ${event.stepKey}: done, snapshot saved`);
      if (event.stepKey === values['crash-after']) {
        say(`  crashing on purpose right after ${event.stepKey} (exit ${CRASH_EXIT_CODE}, no cleanup, lease not released)`);
        process.exit(CRASH_EXIT_CODE);
      }
    }
  });
  if (result.ok) {
    say(`checkout complete: ${JSON.stringify(result.value)}`);
    report({ type: 'finished', outcome: 'completed', order: result.value });
    break;
  }
  if (isConcurrentExecution(result.error)) {
    if (values['retry-while-locked'] && Date.now() < deadline) {
      if (!waitingForLease) say('  another process holds the lease on this workflow; retrying every 250 ms until it expires');
      waitingForLease = true;
      await new Promise((resolve) => setTimeout(resolve, 250));
      continue;
    }
    say(`not running: ${result.error.message}`);
    report({ type: 'finished', outcome: 'locked-out', message: result.error.message });
    break;
  }
  say(`checkout failed: ${JSON.stringify(result.error)}`);
  report({ type: 'finished', outcome: 'failed', error: JSON.stringify(result.error) });
  process.exitCode = 1;
  break;
}

await store.close();
await client.close();
process.disconnect?.();
