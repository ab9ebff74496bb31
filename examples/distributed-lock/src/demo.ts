/**
 * Several worker processes (src/worker.ts) increment one shared counter, each increment inside
 * `withLock` and written with the lock's fencing token. One worker is frozen with SIGSTOP while
 * it holds the lock, past the end of its lease: another worker takes the lock (with a higher
 * fence) and writes. When the frozen worker wakes up, it still believes it holds the lock and
 * writes its stale value; the database rejects that write because its fence is old. The final
 * count is exact.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createCounterTable, readCounter, resetCounter } from './counter.ts';
import { LEASE_MS, type DemoMessage, type WorkerMessage } from './protocol.ts';

export interface LockDemoOptions {
  url: string;
  workers?: number;
  incrementsPerWorker?: number;
  log?: (line: string) => void;
}

export interface Check {
  claim: string;
  ok: boolean;
}

export interface LockDemoSummary {
  counterId: string;
  expected: number;
  finalValue: number;
  /** The fence the frozen worker held, and the counter's fence when it woke up. */
  frozen: { fence: number; valueRead: number; fenceWrittenMeanwhile: number; valueWrittenMeanwhile: number };
  workers: { written: number; rejected: number; leaseLost: number }[];
  checks: Check[];
}

const workerScript = fileURLToPath(new URL('./worker.ts', import.meta.url));

export async function runLockDemo({ url, workers = 4, incrementsPerWorker = 5, log = console.log }: LockDemoOptions): Promise<LockDemoSummary> {
  const counterId = `demo-${randomUUID().slice(0, 8)}`;
  const expected = workers * incrementsPerWorker;
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const checks: Check[] = [];
  const check = (claim: string, ok: boolean) => {
    checks.push({ claim, ok });
    log(`  ${ok ? '✔' : '✘'} ${claim}`);
  };
  const children: ChildProcess[] = [];

  try {
    await createCounterTable(pool);
    await resetCounter(pool, counterId);
    log(`${workers} worker processes will each add 1 to counter ${counterId} ${incrementsPerWorker} times (lease ${LEASE_MS} ms).`);
    log('Worker 1 will be frozen (SIGSTOP) while it holds the lock, until another worker has taken the lock and written.');
    log('');

    const results: Promise<WorkerMessage & { type: 'done' }>[] = [];
    const startWorker = (n: number, onHolding?: (child: ChildProcess, holding: WorkerMessage & { type: 'holding' }) => void) => {
      const args = [counterId, '--increments', String(incrementsPerWorker), ...(onHolding ? ['--report-holding'] : [])];
      const child = fork(workerScript, args, {
        env: { ...process.env, DATABASE_URL: url },
        execArgv: [],
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
      children.push(child);
      const prefix = (chunk: Buffer) => {
        for (const line of chunk.toString().trimEnd().split('\n')) log(`    [worker ${n}] ${line}`);
      };
      child.stdout!.on('data', prefix);
      child.stderr!.on('data', prefix);
      results.push(
        new Promise((resolve, reject) => {
          child.on('message', (message: WorkerMessage) => {
            if (message.type === 'done') resolve(message);
            if (message.type === 'holding') onHolding?.(child, message);
          });
          child.on('exit', (code) => reject(new Error(`worker ${n} exited with code ${code} before reporting`)));
        }),
      );
    };

    // Worker 1 goes first. Once it holds the lock (and has read the counter), freeze it.
    const holding = await new Promise<{ child: ChildProcess; holding: WorkerMessage & { type: 'holding' } }>((resolve) =>
      startWorker(1, (child, message) => resolve({ child, holding: message })),
    );
    holding.child.kill('SIGSTOP');
    log(`  froze worker 1 (it holds fence ${holding.holding.fence} and read ${holding.holding.valueRead}); its lease runs out in ${LEASE_MS} ms`);

    // The others start now, wait for the frozen worker's lease to run out, and get on with it.
    for (let n = 2; n <= workers; n++) startWorker(n);

    // Thaw worker 1 once the others have written a few increments with newer fences.
    const overtakenBy = Math.min(3, (workers - 1) * incrementsPerWorker);
    const deadline = Date.now() + 30_000;
    let frozen: LockDemoSummary['frozen'] | undefined;
    while (frozen === undefined) {
      const now = await readCounter(pool, counterId);
      if (now.lastFence > holding.holding.fence && now.value >= holding.holding.valueRead + overtakenBy) {
        frozen = { fence: holding.holding.fence, valueRead: holding.holding.valueRead, fenceWrittenMeanwhile: now.lastFence, valueWrittenMeanwhile: now.value };
        log(`  meanwhile the others took the lock and counted up to ${now.value} (last fence ${now.lastFence}); thawing worker 1`);
      } else if (Date.now() > deadline) {
        throw new Error('no other worker wrote within 30 s while worker 1 was frozen');
      } else {
        await sleep(50);
      }
    }
    holding.child.kill('SIGCONT');
    holding.child.send({ type: 'continue' } satisfies DemoMessage);

    const done = await Promise.all(results);
    const finalValue = (await readCounter(pool, counterId)).value;
    const rejected = done.reduce((sum, worker) => sum + worker.rejected, 0);

    log('');
    log(`final count: ${finalValue} (expected ${expected})`);
    check('worker 1 was frozen past its lease while another worker took the lock and wrote', frozen.fenceWrittenMeanwhile > frozen.fence);
    check(`the frozen worker's stale write (fence ${frozen.fence}) was rejected by the guarded UPDATE`, done[0]!.rejected >= 1);
    // Any other rejection means a worker stalled past its lease too: the fence caught that as well.
    log(`  stale writes rejected in all: ${rejected} (1 expected, more only if another worker stalled past its lease)`);
    check(`the count is exact: ${finalValue} = ${workers} workers x ${incrementsPerWorker}`, finalValue === expected);
    log(
      `  (without the fence guard, worker 1 would have written ${frozen.valueRead + 1} over ${frozen.valueWrittenMeanwhile}: ` +
        `the ${frozen.valueWrittenMeanwhile - frozen.valueRead} increments made while it was frozen would have been lost)`,
    );

    return { counterId, expected, finalValue, frozen, workers: done.map(({ written, rejected, leaseLost }) => ({ written, rejected, leaseLost })), checks };
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await pool.end();
  }
}
