/**
 * One worker process: adds 1 to the shared counter `--increments` times, each time inside
 * `withLock`: read the counter, then write value + 1 guarded by the lock's fencing token.
 * A rejected write (stale fence) is retried under a new lock.
 *
 *   DATABASE_URL=... node src/worker.ts <counter-id> --increments 5 [--report-holding]
 *
 * With `--report-holding`, the first time it holds the lock it tells the demo (which then
 * freezes this process with SIGSTOP, as a long GC pause or a stalled VM would) and waits
 * for the demo's `continue` before writing.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresLockProvider } from '@stowage/postgres';
import { isStowageError } from '@stowage/core';
import { readCounter, writeCounter } from './counter.ts';
import { LEASE_MS, type DemoMessage, type WorkerMessage } from './protocol.ts';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    increments: { type: 'string', default: '5' },
    'report-holding': { type: 'boolean', default: false },
  },
});
const counterId = positionals[0];
const url = process.env.DATABASE_URL;
if (!counterId || !url) {
  console.error('usage: DATABASE_URL=... node src/worker.ts <counter-id> [--increments N] [--report-holding]');
  process.exit(2);
}

const send = (message: WorkerMessage) => process.send?.(message);
const nextMessage = () => new Promise<DemoMessage>((resolve) => process.once('message', resolve));

const locks = new PostgresLockProvider({ url, pool: { max: 2 } });
const pool = new pg.Pool({ connectionString: url, max: 2 });
const stats = { written: 0, rejected: 0, leaseLost: 0 };
let reportHolding = values['report-holding'];

for (let i = 0; i < Number(values.increments); i++) {
  for (;;) {
    let outcome: 'written' | 'rejected' | undefined;
    try {
      await locks.withLock(
        `counter:${counterId}`,
        async (_signal, handle) => {
          const { value } = await readCounter(pool, counterId);
          if (reportHolding) {
            reportHolding = false;
            console.log(`holding the lock with fence ${handle.fence}, read ${value}; telling the demo`);
            send({ type: 'holding', fence: handle.fence, valueRead: value });
            await nextMessage();
            console.log(`resumed; writing ${value + 1} with fence ${handle.fence}`);
          }
          outcome = (await writeCounter(pool, counterId, value + 1, handle.fence)) ? 'written' : 'rejected';
          if (outcome === 'rejected') console.log(`write with fence ${handle.fence} REJECTED: a newer fence already wrote`);
        },
        { ttl: LEASE_MS, wait: 30_000 },
      );
    } catch (error) {
      // withLock noticed (when its next extension failed) that the lease was lost meanwhile.
      if (!isStowageError(error, 'E_LOCK_LOST')) throw error;
      stats.leaseLost++;
      console.log('withLock: the lease was lost while the function ran (E_LOCK_LOST)');
    }
    if (outcome === 'written') {
      stats.written++;
      break;
    }
    if (outcome === 'rejected') stats.rejected++;
    // Rejected or unknown: take the lock again and redo the increment from a fresh read.
  }
}

console.log(`done: ${stats.written} increments written, ${stats.rejected} stale writes rejected`);
send({ type: 'done', ...stats });
await locks.close();
await pool.end();
process.disconnect?.();
