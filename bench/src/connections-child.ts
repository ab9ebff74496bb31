/**
 * One process of the connections run: every store of @stowage/postgres created from one URL
 * (each with the URL, as an application that knows nothing of pools writes it; or all from one
 * `connect(url)`), then a mixed workload on all of them for `workloadMs`, 16 calls in flight,
 * including lock acquisitions that wait (which open the LISTEN connection). Reports calls and
 * errors by code; `application_name` is unique to the process, so the parent can count its
 * connections in `pg_stat_activity`.
 */
import { StowageError } from '@stowage/core';
import * as stowage from '@stowage/postgres';

export interface ConnectionsJob {
  url: string;
  schema: string;
  applicationName: string;
  workloadMs: number;
  /** `urls`: every store constructed from the URL; `connect`: every store from one `connect(url)`. */
  mode: 'urls' | 'connect';
}

export type ConnectionsReport =
  | { type: 'ready' }
  | { type: 'done'; calls: number; errors: Record<string, number>; firstError: string | null }
  | { type: 'error'; message: string };

const IN_FLIGHT = 16;

function open(job: ConnectionsJob) {
  const shared = { schema: job.schema, applicationName: job.applicationName };
  const own = `p${process.pid}`;
  if (job.mode === 'connect') {
    const db = stowage.connect({ url: job.url, ...shared });
    return {
      stores: {
        kv: db.kv(),
        snapshots: db.snapshots({ lock: true }),
        locks: db.locks(),
        cache: db.cache({ prefix: own }),
        breakers: db.circuitBreaker(),
        checkpoints: db.checkpoints(),
        idempotency: db.idempotency(),
        process: db.process(),
      },
      close: () => db.close(),
    };
  }
  const options = { url: job.url, ...shared };
  const stores = {
    kv: new stowage.PostgresKeyValueStore(options),
    snapshots: stowage.postgres({ ...options, lock: true }),
    locks: new stowage.PostgresLockProvider(options),
    cache: new stowage.PostgresCacheProvider({ ...options, prefix: own }),
    breakers: new stowage.PostgresCircuitBreakerStore(options),
    checkpoints: new stowage.PostgresCheckpointStore(options),
    idempotency: new stowage.PostgresIdempotencyStore(options),
    process: stowage.createPostgresProcessBackend(options),
  };
  return { stores, close: async () => void (await Promise.all(Object.values(stores).map((s) => s.close()))) };
}

async function main(): Promise<void> {
  const job = JSON.parse(process.argv[2]!) as ConnectionsJob;
  const send = (message: ConnectionsReport) => process.send?.(message);
  const { stores: s, close } = open(job);
  const own = `p${process.pid}`;
  const errors: Record<string, number> = {};
  let firstError: string | null = null;
  let calls = 0;
  const one = async (i: number): Promise<void> => {
    const key = `${own}:${i % 50}`;
    switch (i % 12) {
      case 0:
        return s.kv.set(key, 'value');
      case 1:
        return void (await s.kv.get(key));
      case 2:
        return s.cache.set(key, { n: i });
      case 3:
        return void (await s.cache.get(key));
      case 4:
        return s.snapshots.save(key, { formatVersion: 1, workflowName: 'w', steps: {}, execution: { status: 'running', lastUpdated: new Date().toISOString() } } as never);
      case 5:
        return void (await s.snapshots.load(key));
      case 6: {
        // a few keys shared by the process's calls: some acquisitions wait (LISTEN)
        const handle = await s.locks.acquire(`${own}:lock:${i % 3}`, 5_000, { wait: 2_000 });
        await new Promise((resolve) => setTimeout(resolve, 2));
        return handle?.release();
      }
      case 7:
        return void (await s.breakers.recordFailure(key, 5, { cooldown: 1_000 }));
      case 8:
        return s.checkpoints.save({ id: `${own}:${i}`, taskId: own, sequence: i, timestamp: Date.now(), progress: 0.5, data: { i } });
      case 9:
        return void (await s.idempotency.reserve(`${own}:${i}`, 10_000));
      case 10:
        return void (await s.process.createItem({ process: 'bench', id: `${own}:${i}`, state: 'new', data: { i } }));
      default:
        return void (await s.process.getItem('bench', `${own}:${i - 1}`));
    }
  };
  send({ type: 'ready' });
  const until = performance.now() + job.workloadMs;
  let next = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < until) {
        const i = next++;
        calls++;
        try {
          await one(i);
        } catch (error) {
          const code = error instanceof StowageError ? error.code : (error as Error).name;
          errors[code] = (errors[code] ?? 0) + 1;
          firstError ??= `${code}: ${(error as Error).message}`;
        }
      }
    }),
  );
  send({ type: 'done', calls, errors, firstError });
  await close().catch(() => undefined);
  process.exit(0);
}

main().catch((error: unknown) => {
  process.send?.({ type: 'error', message: (error as Error).stack ?? String(error) } satisfies ConnectionsReport);
  process.exit(1);
});
