/**
 * The demo's two scenes, each played by real worker processes (src/worker.ts) against one
 * database:
 *
 * 1. Crash and resume: worker 1 completes `fetch-user`, then dies before `create-order`.
 *    Worker 2 is started on the same workflow id, waits for the dead worker's lease to run
 *    out, loads the snapshot and finishes with `create-order` only.
 * 2. Race: workers A and B start the same workflow id at the same moment. The stowage lock
 *    lets exactly one of them run it; the other is turned away.
 *
 * Side-effect counters in the database show how many times each step really ran.
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { postgres } from '@stowage/postgres';
import { CRASH_EXIT_CODE, type DemoMessage, type WorkerMessage } from './protocol.ts';
import { DEMO_SCHEMA, SideEffects } from './side-effects.ts';

export interface DemoOptions {
  /** The database every process connects to. */
  url: string;
  log?: (line: string) => void;
}

export interface Check {
  claim: string;
  ok: boolean;
}

export interface DemoSummary {
  crash: {
    workflowId: string;
    crashedWorkerExitCode: number | null;
    /** What the store held right after the crash. */
    snapshotAfterCrash: { completedSteps: string[]; status: string } | null;
    callsAfterCrash: Record<string, number>;
    resumedOutcome: WorkerMessage | undefined;
    callsAfterResume: Record<string, number>;
    snapshotAfterCompletion: unknown;
  };
  race: {
    workflowId: string;
    outcomes: string[];
    calls: Record<string, number>;
  };
  checks: Check[];
}

const workerScript = fileURLToPath(new URL('./worker.ts', import.meta.url));

interface RunningWorker {
  messages: WorkerMessage[];
  /** Resolves with the first message of this type. */
  next(type: WorkerMessage['type']): Promise<WorkerMessage>;
  /** Sends unless the worker has already exited. */
  send(message: DemoMessage): void;
  exited: Promise<number | null>;
}

function startWorker(name: string, args: string[], url: string, log: (line: string) => void): RunningWorker {
  const child = fork(workerScript, args, {
    env: { ...process.env, DATABASE_URL: url },
    execArgv: [],
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const prefix = (chunk: Buffer) => {
    for (const line of chunk.toString().trimEnd().split('\n')) log(`    [${name}] ${line}`);
  };
  child.stdout!.on('data', prefix);
  child.stderr!.on('data', prefix);
  const messages: WorkerMessage[] = [];
  const waiting: { type: WorkerMessage['type']; resolve: (message: WorkerMessage) => void }[] = [];
  child.on('message', (message: WorkerMessage) => {
    messages.push(message);
    for (const waiter of waiting.filter((w) => w.type === message.type)) waiter.resolve(message);
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    messages,
    next: (type) =>
      new Promise((resolve, reject) => {
        const seen = messages.find((message) => message.type === type);
        if (seen) return resolve(seen);
        waiting.push({ type, resolve });
        void exited.then((code) => reject(new Error(`${name} exited (${code}) before sending "${type}"`)));
      }),
    send: (message) => {
      // A worker that already finished may be closing its channel: nothing left to tell it.
      if (child.connected) child.send(message, () => undefined);
    },
    exited,
  };
}

export async function runCheckoutDemo({ url, log = console.log }: DemoOptions): Promise<DemoSummary> {
  const runId = randomUUID().slice(0, 8);
  const sideEffects = new SideEffects(url);
  // A plain store (no lock) to look at the snapshots the workers leave behind.
  const inspector = postgres({ url, schema: DEMO_SCHEMA, pool: { max: 1 } });
  const checks: Check[] = [];
  const check = (claim: string, ok: boolean) => {
    checks.push({ claim, ok });
    log(`  ${ok ? '✔' : '✘'} ${claim}`);
  };

  try {
    await sideEffects.createTable();

    // Scene 1 ─────────────────────────────────────────────────────────────────────────────
    const crashId = `checkout-${runId}-crash`;
    log('');
    log(`Scene 1: a worker crashes between the two steps of ${crashId}`);
    // Worker 2 is started now and waits for a signal, so that it tries the workflow the moment
    // worker 1 has died (within worker 1's lease), however slowly processes start here.
    const worker2 = startWorker('worker 2', [crashId, '--retry-while-locked', '--wait-for-go'], url, log);
    await worker2.next('ready');
    const worker1 = startWorker('worker 1', [crashId, '--crash-after', 'fetch-user'], url, log);
    const crashedWorkerExitCode = await worker1.exited;
    check(`worker 1 died on purpose (exit code ${crashedWorkerExitCode})`, crashedWorkerExitCode === CRASH_EXIT_CODE);

    const saved = await inspector.load(crashId);
    const snapshotAfterCrash = saved && { completedSteps: Object.keys(saved.steps), status: saved.execution.status };
    const callsAfterCrash = await sideEffects.calls(crashId);
    log(`  the store holds a snapshot: ${JSON.stringify(snapshotAfterCrash)}`);
    log(`  side effects so far: ${JSON.stringify(callsAfterCrash)}`);
    check(
      'the snapshot records fetch-user as done and the run as unfinished',
      JSON.stringify(snapshotAfterCrash) === JSON.stringify({ completedSteps: ['fetch-user'], status: 'running' }),
    );

    log('');
    log('  worker 2 now runs the same workflow id (it waits until the dead worker\'s lease runs out)');
    worker2.send('go');
    const worker2Exit = await worker2.exited;
    const resumedOutcome = worker2.messages.find((message) => message.type === 'finished');
    const callsAfterResume = await sideEffects.calls(crashId);
    const snapshotAfterCompletion = await inspector.load(crashId);
    log(`  side effects now: ${JSON.stringify(callsAfterResume)}`);
    check('worker 2 completed the checkout', worker2Exit === 0 && resumedOutcome?.type === 'finished' && resumedOutcome.outcome === 'completed');
    check('fetchUser ran once in total: worker 2 resumed from the snapshot instead of fetching again', callsAfterResume.fetchUser === 1);
    check('createOrder ran once, in worker 2', callsAfterResume.createOrder === 1 && callsAfterCrash.createOrder === undefined);
    check('the finished workflow was removed from the store', snapshotAfterCompletion === null);

    // Scene 2 ─────────────────────────────────────────────────────────────────────────────
    const raceId = `checkout-${runId}-race`;
    log('');
    log(`Scene 2: two workers start ${raceId} at the same moment`);
    const racers = [
      startWorker('worker A', [raceId, '--wait-for-go', '--hold-fetch-user'], url, log),
      startWorker('worker B', [raceId, '--wait-for-go', '--hold-fetch-user'], url, log),
    ];
    await Promise.all(racers.map((racer) => racer.next('ready')));
    log('  both connected; go!');
    for (const racer of racers) racer.send('go');
    // The lease holder waits in fetch-user, so the first to finish is the one turned away.
    // (If the lock let both in, neither would finish: after 20 s both are let go, and the checks fail.)
    const firstToFinish = await Promise.race([
      ...racers.map((racer) => racer.next('finished')),
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 20_000).unref()),
    ]);
    const turnedAway = firstToFinish?.type === 'finished' && firstToFinish.outcome === 'locked-out';
    log(`  ${turnedAway ? 'one worker was turned away while the other holds the lease;' : 'nobody was turned away within 20 s;'} letting the holder finish`);
    for (const racer of racers) racer.send('proceed');
    await Promise.all(racers.map((racer) => racer.exited));
    const outcomes = racers.map((racer) => {
      const finished = racer.messages.find((message) => message.type === 'finished');
      return finished?.type === 'finished' ? finished.outcome : 'no answer';
    });
    const raceCalls = await sideEffects.calls(raceId);
    log(`  outcomes: ${outcomes.join(', ')}; side effects: ${JSON.stringify(raceCalls)}`);
    check(
      'exactly one worker ran the workflow and the other was turned away by the lock',
      [...outcomes].sort().join() === 'completed,locked-out',
    );
    check('each step ran exactly once', raceCalls.fetchUser === 1 && raceCalls.createOrder === 1);

    return {
      crash: {
        workflowId: crashId,
        crashedWorkerExitCode,
        snapshotAfterCrash,
        callsAfterCrash,
        resumedOutcome,
        callsAfterResume,
        snapshotAfterCompletion,
      },
      race: { workflowId: raceId, outcomes, calls: raceCalls },
      checks,
    };
  } finally {
    await inspector.close();
    await sideEffects.close();
  }
}
