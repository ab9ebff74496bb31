/**
 * One worker process: opens the stowage Postgres store (with the cross-process lock) and runs
 * the checkout for one workflow id. The demo starts it as a child process:
 *
 *   node src/worker.ts <workflow-id> [--crash-after fetch-user] [--wait-for-go] [--hold-fetch-user] [--retry-while-locked]
 *
 * It reports to its parent over the IPC channel and prints what it does on stdout.
 */
import { parseArgs } from 'node:util';
import { postgres } from '@stowage/postgres';
import { isConcurrentExecution } from 'awaitly/durable';
import { checkoutSteps, runCheckout } from './checkout.ts';
import { CRASH_EXIT_CODE, type DemoMessage, type WorkerMessage } from './protocol.ts';
import { DEMO_SCHEMA, SideEffects } from './side-effects.ts';

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
const url = process.env.DATABASE_URL;
if (!workflowId || !url) {
  console.error('usage: DATABASE_URL=... node src/worker.ts <workflow-id> [--crash-after <step-key>] [--wait-for-go] [--hold-fetch-user] [--retry-while-locked]');
  process.exit(2);
}

const report = (message: WorkerMessage) => process.send?.(message);
const say = (text: string) => console.log(text);

// `lock` makes the store an awaitly WorkflowLock too: durable.run then takes a lease on the
// workflow id before it starts, renews it while it runs and releases it at the end.
const store = postgres({ url, schema: DEMO_SCHEMA, lock: {}, pool: { max: 2 } });
const sideEffects = new SideEffects(url);
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
await sideEffects.close();
process.disconnect?.();
