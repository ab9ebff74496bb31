/**
 * The load of the failover check (failover.ts), run in several OS processes at once. Each
 * process uses the `@stowage/postgres` stores as an application does, all through the test's
 * proxy, and at the same time:
 *
 * - increments a shared key-value counter (`getEntry` → `compareAndSet`, retry on conflict);
 * - increments a shared snapshot counter (`loadVersioned` → `save` with `expectedVersion`);
 * - takes locks on a few hot keys and writes to a fenced guard record (guard.ts) under each;
 * - walks through idempotency keys that every process also walks (`reserve` → `complete`);
 * - creates process items and runs a worker of the process that moves them through its states.
 *
 * Every call is recorded with its outcome and when it started and ended (the host's monotonic
 * clock, which all processes share), and streamed to the parent; what was acknowledged is
 * returned at the end, for the parent to find on the new primary.
 */
import { bindProcess, defineProcess, isStowageError, type LockHandle } from '@stowage/core';
import {
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresSnapshotStore,
  createPostgresProcessBackend,
  type PostgresStoreOptions,
} from '@stowage/postgres';
import pg from 'pg';
import { decideWrite, emptyGuardState, hostClock, leaveGuard, updateGuard, type GuardState, type GuardStore, type Holder, type WriteVerdict } from '../guard.ts';
import { describeError } from '../report.ts';
import { pick, randomInt, settleWithin, sleep } from '../util.ts';
import type { Role } from '../workers.ts';
import type { Grant } from './lock-safety.ts';

export const APPLICATION_NAME = 'stowage-reliability-failover';

/** The calls that write: one of them succeeding through the new primary is "the first write". */
export const WRITE_KINDS = ['kv.compareAndSet', 'snapshots.save', 'locks.acquire', 'idempotency.reserve', 'idempotency.complete', 'process.start'] as const;

/**
 * [kind, outcome, start, end]: kind names the store and method (`kv.compareAndSet`; the process
 * worker's own calls are `worker.<method>`, its feeds' `worker.feed.read`, its cursors'
 * `worker.cursors.<method>`); outcome is `ok`, `none` (a lock not granted within its wait),
 * `conflict` (`E_VERSION_CONFLICT`: another writer was first, the normal answer of a
 * compare-and-set), a StowageError code (with ` 25006` when the server refused a write as
 * read-only), `hung`, or `other: …` for anything that is not a StowageError. Times in ms on
 * the host's monotonic clock.
 */
export type OpRecord = [string, string, number, number];

export interface LoadParams {
  url: string;
  schema: string;
  timeoutMs: number;
  /** A call still pending after this long is recorded as hung and left behind. */
  hangMs: number;
  kvCounter: string;
  snapshotCounter: string;
  lockKeys: string[];
  lockTtl: number;
  lockWait: number;
  idempotencyTtl: number;
  processName: string;
  processLease: number;
  itemEveryMs: number;
}

export interface LoadResult {
  /** Counter values this process's acknowledged compare-and-sets wrote. */
  kvAcked: number[];
  /** Compare-and-sets that failed without an answer (they may or may not have been applied). */
  kvUnknown: number;
  snapshotAcked: number[];
  snapshotUnknown: number;
  grants: Grant[];
  guard: GuardFigures;
  /** [key, this process's index] for every reservation it won. */
  idempotencyWins: [string, number][];
  /** Keys whose completion this process saw acknowledged. */
  idempotencyCompleted: string[];
  /** [key, winner] for every completed result this process found when it reserved. */
  idempotencySeen: [string, number][];
  /** Reservations that failed without an answer (the claim may be there, held by nobody, until its ttl). */
  idempotencyUnknown: number;
  /** Ids of the process items whose creation was acknowledged. */
  itemsCreated: string[];
  /** Outcomes of the errors the process worker reported (`onEvent`), e.g. `E_UNAVAILABLE (extending a lease)`. */
  workerErrors: string[];
  /** Handler calls, and how many were a repeat for a stay the process had already handled. */
  handlerCalls: number;
  handlerRepeats: number;
  conflicts: number;
}

export interface GuardFigures {
  accepted: number;
  overlaps: number;
  staleAccepted: number;
  validRejected: number;
  staleRejected: number;
  /** Guard statements retried after a lost connection. */
  retries: number;
}

/** What the workers stream to the parent. */
export interface LoadEvent {
  records: OpRecord[];
}

/** Store settings as an application behind a failover proxy would set them: fail fast while it moves. */
export function storeOptions(url: string, schema: string, timeoutMs: number): PostgresStoreOptions {
  return {
    url,
    schema,
    applicationName: APPLICATION_NAME,
    pool: { connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs },
  };
}

/** The process the load runs: three states with a handler each, then `done`. */
export function failoverProcess(name: string, lease: number, onHandler: (itemId: string, state: string, key: string) => void) {
  const step = (to: 'b' | 'c' | 'done') => async (item: { id: string; state: string }, context: { idempotencyKey: string }) => {
    onHandler(item.id, item.state, context.idempotencyKey);
    await sleep(randomInt(0, 10));
    return to;
  };
  return defineProcess({
    name,
    initial: 'a',
    states: { a: { handler: step('b') }, b: { handler: step('c') }, c: { handler: step('done') } },
    terminal: ['done', 'failed'],
    lease,
    // A failover costs an item an attempt or two (claims whose transition could not be
    // written); dead-lettering is not what this check is about.
    retry: { maxAttempts: 50, backoff: { initial: 100, factor: 1, max: 100 } },
  });
}

/**
 * `target` with every call of a method that returns a promise recorded as `<prefix>.<method>`
 * (and the feeds `openFeed` returns as `<prefix>.feed`): the calls the process worker makes on
 * its own, timed like the load's. Methods run on the target itself (its private fields).
 */
function recorded<T extends object>(target: T, prefix: string, record: (kind: string, outcome: string, start: number) => void): T {
  return new Proxy(target, {
    get(object, property) {
      const value = Reflect.get(object, property, object) as unknown;
      if (typeof value !== 'function' || typeof property !== 'string') return value;
      return (...args: unknown[]) => {
        const start = hostClock();
        const returned = (value as (...args: unknown[]) => unknown).apply(object, args);
        if (!(returned instanceof Promise)) return returned;
        return returned.then(
          (result: unknown) => {
            record(`${prefix}.${property}`, 'ok', start);
            return property === 'openFeed' ? recorded(result as object, `${prefix}.feed`, record) : result;
          },
          (error: unknown) => {
            record(`${prefix}.${property}`, outcomeOf(error), start);
            throw error;
          },
        );
      };
    },
  });
}

/** The guard's view of a lock holder: its lease on the lock store's clock, its acquisition on the host's. */
export function holderOf(handle: LockHandle, ttl: number, asked: number, returned: number): Holder {
  const expires = handle.expiresAt.getTime();
  return { owner: handle.owner, fence: handle.fence, grant: expires - ttl, expires, start: asked, end: returned };
}

/** How a call ended, as recorded: a read-only answer of the server is marked, to be counted. */
export function outcomeOf(error: unknown): string {
  if (isStowageError(error, 'E_VERSION_CONFLICT')) return 'conflict';
  if (!isStowageError(error)) return `other: ${describeError(error)}`;
  return (error.cause as { code?: unknown } | undefined)?.code === READ_ONLY ? `${error.code} ${READ_ONLY}` : error.code;
}

/** SQLSTATE read_only_sql_transaction: a standby (or a demoted primary) refusing a write. */
export const READ_ONLY = '25006';

export const failoverLoad: Role<LoadParams, LoadResult> = async (_backend, params, context) => {
  const options = storeOptions(params.url, params.schema, params.timeoutMs);
  const kv = new PostgresKeyValueStore(options);
  const snapshots = new PostgresSnapshotStore<{ count: number }>(options);
  const locks = new PostgresLockProvider(options);
  const idempotency = new PostgresIdempotencyStore(options);
  const processes = createPostgresProcessBackend(options);
  const cursors = new PostgresKeyValueStore({ ...options, table: 'failover_cursors' });
  const guard = new ReconnectingGuard(params.url, params.schema);
  const result: LoadResult = {
    kvAcked: [],
    kvUnknown: 0,
    snapshotAcked: [],
    snapshotUnknown: 0,
    grants: [],
    guard: { accepted: 0, overlaps: 0, staleAccepted: 0, validRejected: 0, staleRejected: 0, retries: 0 },
    idempotencyWins: [],
    idempotencyCompleted: [],
    idempotencySeen: [],
    idempotencyUnknown: 0,
    itemsCreated: [],
    workerErrors: [],
    handlerCalls: 0,
    handlerRepeats: 0,
    conflicts: 0,
  };

  let pending: OpRecord[] = [];
  const flush = () => {
    if (pending.length === 0) return;
    context.emit({ records: pending } satisfies LoadEvent);
    pending = [];
  };
  const flusher = setInterval(flush, 100);
  const record = (kind: string, outcome: string, start: number) => pending.push([kind, outcome, start, hostClock()]);

  /** Runs one call, records it; `undefined` when it failed (recorded), never waits past hangMs. */
  const call = async <T>(kind: string, fn: () => Promise<T>, outcome: (value: T) => string = () => 'ok'): Promise<{ value: T } | { error: string }> => {
    const start = hostClock();
    const settled = await settleWithin(params.hangMs, fn);
    if (settled.status === 'fulfilled') {
      record(kind, outcome(settled.value), start);
      return { value: settled.value };
    }
    const error = settled.status === 'hung' ? 'hung' : outcomeOf(settled.reason);
    record(kind, error, start);
    return { error };
  };
  /** After a failed call: a moment's pause, as a client retrying would take. */
  const pause = () => sleep(20);

  const loadStopped = context.told('stop-load');
  let stopping = false;
  void loadStopped.then(() => (stopping = true));

  const kvLoop = async () => {
    while (!stopping) {
      const read = await call('kv.getEntry', () => kv.getEntry(params.kvCounter));
      if ('error' in read || read.value === null) {
        await pause();
        continue;
      }
      const next = Number(read.value.value) + 1;
      const write = await call('kv.compareAndSet', () => kv.compareAndSet(params.kvCounter, String(next), read.value!.version));
      if ('value' in write) result.kvAcked.push(next);
      else if (write.error === 'conflict') await sleep(randomInt(0, 4));
      else {
        result.kvUnknown += 1;
        await pause();
      }
    }
  };

  const snapshotLoop = async () => {
    while (!stopping) {
      const read = await call('snapshots.loadVersioned', () => snapshots.loadVersioned(params.snapshotCounter));
      if ('error' in read || read.value === null) {
        await pause();
        continue;
      }
      const next = Number(read.value.snapshot.count) + 1;
      const write = await call('snapshots.save', () =>
        snapshots.save(params.snapshotCounter, { count: next }, { expectedVersion: read.value!.version }),
      );
      if ('value' in write) result.snapshotAcked.push(next);
      else if (write.error === 'conflict') await sleep(randomInt(0, 4));
      else {
        result.snapshotUnknown += 1;
        await pause();
      }
    }
  };

  const lockLoop = async () => {
    while (!stopping) {
      const key = pick(params.lockKeys);
      const asked = hostClock();
      const acquired = await call(
        'locks.acquire',
        () => locks.acquire(key, params.lockTtl, { wait: params.lockWait, pollInterval: 20 }),
        (handle) => (handle === null ? 'none' : 'ok'),
      );
      if ('error' in acquired) {
        await pause();
        continue;
      }
      const handle: LockHandle | null = acquired.value;
      if (handle === null) continue;
      const entered = hostClock();
      result.grants.push([key, handle.fence, asked, entered]);
      const me = holderOf(handle, params.lockTtl, asked, entered);
      const verdict = await guard.write(key, me, result.guard);
      if (verdict.overlap) result.guard.overlaps += 1;
      if (verdict.accepted) {
        result.guard.accepted += 1;
        if (verdict.stale) result.guard.staleAccepted += 1;
        await sleep(randomInt(0, 5));
        await guard.leave(key, me, result.guard);
      } else if (verdict.later) {
        result.guard.validRejected += 1;
      } else {
        result.guard.staleRejected += 1;
      }
      await call('locks.release', () => handle.release());
    }
  };

  const idempotencyLoop = async () => {
    for (let n = 0; !stopping; n++) {
      const key = `idem-${n}`;
      const reserved = await call('idempotency.reserve', () => idempotency.reserve<{ winner: number }>(key, params.idempotencyTtl));
      if ('error' in reserved) {
        result.idempotencyUnknown += 1;
        await pause();
        continue;
      }
      const reservation = reserved.value;
      if (reservation.status === 'completed') {
        result.idempotencySeen.push([key, reservation.value.winner]);
        continue;
      }
      if (reservation.status === 'in-flight') continue;
      result.idempotencyWins.push([key, context.index]);
      // The winner completes, retrying through the failover until the result is stored.
      let unanswered = false;
      while (!stopping) {
        const completed = await call('idempotency.complete', () => idempotency.complete(key, reservation.token, { winner: context.index }));
        if ('value' in completed) {
          result.idempotencyCompleted.push(key);
          break;
        }
        if (completed.error === 'E_LOCK_NOT_OWNED' && unanswered) {
          // An earlier attempt may have been applied without its answer reaching us.
          const stored = await call('idempotency.get', () => idempotency.get<{ winner: number }>(key));
          if ('value' in stored && stored.value?.value.winner === context.index) result.idempotencyCompleted.push(key);
          break;
        }
        if (completed.error === 'E_LOCK_NOT_OWNED') break;
        unanswered = true;
        await pause();
      }
    }
  };

  // The process: this process's worker runs every state; items are created at a steady pace.
  const handled = new Set<string>();
  const definition = failoverProcess(params.processName, params.processLease, (_itemId, _state, key) => {
    result.handlerCalls += 1;
    if (handled.has(key)) result.handlerRepeats += 1;
    handled.add(key);
  });
  const machine = bindProcess(processes, definition);
  // The worker runs on the same backend and cursors, every call it makes recorded.
  const worker = bindProcess(recorded(processes, 'worker', record), definition).worker({
    name: `load-${context.index}`,
    cursors: recorded(cursors, 'worker.cursors', record),
    concurrency: { a: 4, b: 4, c: 4 },
    pollInterval: 200,
    // Items a feed missed while the primary was gone are picked up by the scan soon.
    unclaimedAfter: 2000,
    shutdownTimeout: 2000,
    onEvent: (event) => {
      if (event.type === 'conflict') result.conflicts += 1;
      if (event.type === 'error') result.workerErrors.push(`${outcomeOf(event.error)} (${event.during.replace(/ "[^"]*"$/, '')})`);
    },
  });
  const creator = async () => {
    for (let seq = 0; !stopping; seq++) {
      const id = `item-${context.index}-${seq}`;
      const created = await call('process.start', () => machine.start(id, {}));
      if ('value' in created) result.itemsCreated.push(id);
      await sleep(params.itemEveryMs);
    }
  };

  try {
    await worker.start();
    context.emit({ records: [] } satisfies LoadEvent);
    await Promise.all([kvLoop(), snapshotLoop(), lockLoop(), idempotencyLoop(), creator()]);
    // The worker keeps moving items until the parent has seen every item arrive.
    await context.told('finish');
    await worker.stop();
  } finally {
    clearInterval(flusher);
    flush();
    for (const store of [kv, snapshots, locks, idempotency, processes, cursors]) await store.close();
    await guard.close();
  }
  return result;
};

/**
 * The fenced resource of the lock loop (see guard.ts), on a raw `pg` client through the same
 * proxy: when its connection is lost it connects again, and a write whose answer was lost is
 * found in the guard's log (its owner and fence) instead of being written twice.
 */
export class ReconnectingGuard implements GuardStore {
  readonly #url: string;
  readonly #table: string;
  #client: Promise<pg.Client> | undefined;

  constructor(url: string, schema: string) {
    this.#url = url;
    this.#table = `${schema}.failover_guard`;
  }

  /** Creates the guard tables (the parent does, before any worker starts). */
  static async create(url: string, schema: string): Promise<void> {
    const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-guard` });
    await client.connect();
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      await client.query(`CREATE TABLE ${schema}.failover_guard (resource text PRIMARY KEY, state jsonb NOT NULL, version bigint NOT NULL)`);
      // Every (owner, fence) the record ever stored as its latest writer.
      await client.query(`CREATE TABLE ${schema}.failover_guard_log (resource text, owner text, fence bigint, PRIMARY KEY (resource, owner, fence))`);
    } finally {
      await client.end();
    }
  }

  async write(resource: string, me: Holder, figures: GuardFigures): Promise<WriteVerdict> {
    let decided: WriteVerdict | undefined;
    return this.#retrying(figures, async () => {
      // A swap that went through whose answer was lost: its verdict is the one decided for it.
      if (decided?.accepted && (await this.#landed(resource, me))) return decided;
      return updateGuard(this, resource, (state) => {
        const { next, verdict } = decideWrite(state, me);
        decided = verdict;
        return { next, result: verdict };
      });
    });
  }

  leave(resource: string, me: Holder, figures: GuardFigures): Promise<void> {
    return this.#retrying(figures, () => leaveGuard(this, resource, me));
  }

  async read(resource: string): Promise<{ state: GuardState; version: number }> {
    const client = await this.#connect();
    const { rows } = await client.query<{ state: GuardState; version: string }>(`SELECT state, version FROM ${this.#table} WHERE resource = $1`, [resource]);
    const row = rows[0];
    return row ? { state: row.state, version: Number(row.version) } : { state: emptyGuardState(), version: 0 };
  }

  async swap(resource: string, version: number, next: GuardState): Promise<boolean> {
    const client = await this.#connect();
    const log = `INSERT INTO ${this.#table}_log (resource, owner, fence) SELECT resource, state->>'lastOwner', (state->>'fence')::bigint FROM changed
      ON CONFLICT DO NOTHING`;
    const result =
      version === 0
        ? await client.query(
            `WITH changed AS (INSERT INTO ${this.#table} (resource, state, version) VALUES ($1, $2, 1) ON CONFLICT (resource) DO NOTHING RETURNING *),
              logged AS (${log}) SELECT count(*)::int AS n FROM changed`,
            [resource, JSON.stringify(next)],
          )
        : await client.query(
            `WITH changed AS (UPDATE ${this.#table} SET state = $2, version = version + 1 WHERE resource = $1 AND version = $3 RETURNING *),
              logged AS (${log}) SELECT count(*)::int AS n FROM changed`,
            [resource, JSON.stringify(next), version],
          );
    return result.rows[0].n === 1;
  }

  async close(): Promise<void> {
    const client = this.#client;
    this.#client = undefined;
    await client?.then((c) => c.end()).catch(() => undefined);
  }

  async #landed(resource: string, me: Holder): Promise<boolean> {
    const client = await this.#connect();
    const { rows } = await client.query(`SELECT 1 FROM ${this.#table}_log WHERE resource = $1 AND owner = $2 AND fence = $3`, [resource, me.owner, me.fence]);
    return rows.length > 0;
  }

  async #retrying<T>(figures: GuardFigures, fn: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await fn();
      } catch {
        figures.retries += 1;
        await this.close();
        await sleep(50);
      }
    }
  }

  #connect(): Promise<pg.Client> {
    this.#client ??= (async () => {
      const client = new pg.Client({ connectionString: this.#url, application_name: `${APPLICATION_NAME}-guard`, connectionTimeoutMillis: 5000, query_timeout: 5000 });
      // An error between queries (the server went away) surfaces on the next query.
      client.on('error', () => undefined);
      await client.connect();
      return client;
    })();
    const connecting = this.#client;
    connecting.catch(() => {
      if (this.#client === connecting) this.#client = undefined;
    });
    return connecting;
  }
}
