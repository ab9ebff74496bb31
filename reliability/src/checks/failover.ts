/**
 * Failover: a PostgreSQL primary with a streaming standby (.ci/failover-clusters.sh), and the
 * test's TCP proxy in front of them as the failover proxy of a production deployment (HAProxy,
 * PgBouncer, a DNS name) would be. Several OS processes load every kind of store through the
 * proxy (failover-load.ts); the primary is stopped hard (immediate shutdown: a crash), the proxy
 * is moved to the standby, the standby is promoted, and the load goes on.
 *
 * Synchronous standby — proves: every write acknowledged before or after the failover is on
 * the new primary (compare-and-set increments, snapshot saves, idempotency completions, process
 * items); fences keep increasing per key across it and the fenced guard accepts no stale one;
 * no two lock holders overlap; no idempotency key has two winners; no process item advances
 * twice; while the servers change, calls fail only with `E_UNAVAILABLE` or `E_TIMEOUT` — a
 * write that reaches the standby before its promotion is checked to be `E_UNAVAILABLE` with the
 * server's `25006` as cause — and none fails once the new primary has answered; nothing hangs.
 *
 * Asynchronous standby — shows the other direction, deterministically: replication is stopped
 * (the standby is behind for certain), writes are acknowledged by the primary alone, and after
 * the same failover every one of them is gone, a fence is handed out again, and an idempotency
 * key gets a second winner. That is why the promises need synchronous replication
 * (reliability/README.md).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { bindProcess, isStowageError } from '@stowage/core';
import {
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresSnapshotStore,
  createPostgresProcessBackend,
  type PostgresStoreOptions,
} from '@stowage/postgres';
import pg from 'pg';
import { isCI } from '@stowage/test-env';
import type { Budget } from '../config.ts';
import { hostClock } from '../guard.ts';
import { TcpProxy } from '../proxy.ts';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend, BackendTarget } from '../backends/types.ts';
import { formatMs, settleWithin, sleep } from '../util.ts';
import { startWorker, type WorkerProcess } from '../workers.ts';
import {
  APPLICATION_NAME,
  ReconnectingGuard,
  WRITE_KINDS,
  failoverProcess,
  READ_ONLY,
  outcomeOf,
  storeOptions,
  holderOf,
  type GuardFigures,
  type LoadEvent,
  type LoadParams,
  type LoadResult,
  type OpRecord,
} from './failover-load.ts';
import { fenceOrderViolations, type Grant } from './lock-safety.ts';
import { unhandled } from './outage.ts';

const run = promisify(execFile);
const CHECK = 'failover';
const SCRIPT = fileURLToPath(new URL('../../../.ci/failover-clusters.sh', import.meta.url));
const SERVER_BIN = process.env.STOWAGE_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const ANSWERS = new Set(['ok', 'none', 'conflict']);
const RETRYABLE = new Set(['E_UNAVAILABLE', 'E_TIMEOUT']);
const KV_COUNTER = 'failover-counter';
const SNAPSHOT_COUNTER = 'failover-counter';
const PROCESS = 'failover';

export async function failover(backend: Backend, report: BackendReport, budget: Budget['failover']): Promise<void> {
  if (backend.target.name !== 'postgres') {
    report.notApplicable(CHECK, 'runs on the postgres row: a primary and a standby of its own (.ci/failover-clusters.sh)');
    return;
  }
  const missing = clustersUnavailable();
  if (missing !== null) {
    if (isCI) report.expect(CHECK, 'primary and standby clusters can be created', `no: ${missing}`, 'yes (CI=true)', false);
    else report.notApplicable(CHECK, `no primary and standby here: ${missing}`);
    return;
  }
  await synchronousFailover(backend.target, report, budget);
  await asynchronousLoss(backend.target, report, budget);
}

/** Why the clusters cannot be created here, or null. */
function clustersUnavailable(): string | null {
  if (!existsSync(`${SERVER_BIN}/initdb`)) return `no PostgreSQL server binaries in ${SERVER_BIN}`;
  if (process.getuid?.() !== 0) return 'the servers run as the postgres OS user: needs root (runuser)';
  return null;
}

/** The primary and the standby of .ci/failover-clusters.sh. */
class Clusters {
  readonly primary: string;
  readonly standby: string;

  private constructor(primary: string, standby: string) {
    this.primary = primary;
    this.standby = standby;
  }

  static async start(mode: 'sync' | 'async'): Promise<Clusters> {
    try {
      const { stdout } = await run('bash', [SCRIPT, 'start', mode], { timeout: 120_000 });
      const [primary, standby] = stdout.trim().split('\n');
      if (!primary || !standby) throw new Error(`${SCRIPT} start printed no URLs: ${stdout}`);
      return new Clusters(primary, standby);
    } catch (error) {
      // Whatever a failed start left running goes now, not at the next start.
      await run('bash', [SCRIPT, 'stop'], { timeout: 60_000 }).catch(() => undefined);
      throw error;
    }
  }

  async killPrimary(): Promise<void> {
    await run('bash', [SCRIPT, 'kill-primary'], { timeout: 60_000 });
  }

  async promote(): Promise<void> {
    await run('bash', [SCRIPT, 'promote'], { timeout: 60_000 });
  }

  async stop(): Promise<void> {
    await run('bash', [SCRIPT, 'stop'], { timeout: 60_000 });
  }
}

function endpoint(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port) };
}

async function admin<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-admin` });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Every store the load uses, opened on `options` (the parent's own: set-up, probe, verification). */
function openStores(options: PostgresStoreOptions) {
  const processes = createPostgresProcessBackend(options);
  return {
    kv: new PostgresKeyValueStore(options),
    snapshots: new PostgresSnapshotStore<{ count: number }>(options),
    locks: new PostgresLockProvider(options),
    idempotency: new PostgresIdempotencyStore(options),
    processes,
    // For start, get, list and history only: the parent runs no worker, so lease and handlers do not matter.
    machine: bindProcess(processes, failoverProcess(PROCESS, 2000, () => undefined)),
    cursors: new PostgresKeyValueStore({ ...options, table: 'failover_cursors' }),
  };
}
type Stores = ReturnType<typeof openStores>;

async function closeStores(stores: Stores): Promise<void> {
  const { machine: _machine, ...closable } = stores;
  for (const store of Object.values(closable)) await store.close();
}

/** Per counter: what acknowledged compare-and-sets wrote, against the value the new primary has. */
function counterFigures(acked: readonly number[], final: number, unanswered: number) {
  const distinct = new Set(acked);
  // A value acknowledged twice was written, lost, and written again on top of an older value;
  // a value the counter never reached was lost outright.
  const lost = acked.length - distinct.size + [...distinct].filter((n) => n > final).length;
  // Increments applied whose answer never came (each failed call may have been applied).
  const applied = final - [...distinct].filter((n) => n <= final).length;
  return { acked: acked.length, final, lost, applied, unanswered };
}

/** The failover with a synchronous standby, under load. */
async function synchronousFailover(target: BackendTarget, report: BackendReport, budget: Budget['failover']): Promise<void> {
  const label = (text: string) => `sync: ${text}`;
  const started = performance.now();
  const schema = target.namespace;
  const clusters = await Clusters.start('sync');
  const proxy = await TcpProxy.start(endpoint(clusters.primary));
  const workers: WorkerProcess<LoadResult>[] = [];
  const unhandledBefore = unhandled.count;
  let parent: Stores | undefined;
  let parentGuard: ReconnectingGuard | undefined;
  try {
    const url = proxy.rewriteUrl(clusters.primary);
    // The parent's own stores, through the proxy like the workers'.
    parent = openStores(storeOptions(url, schema, budget.timeoutMs));
    parentGuard = new ReconnectingGuard(url, schema);
    await ReconnectingGuard.create(url, schema);
    await parent.kv.set(KV_COUNTER, '0');
    await parent.snapshots.save(SNAPSHOT_COUNTER, { count: 0 });
    await Promise.all([parent.locks.ready(), parent.idempotency.ready(), parent.processes.ready(), parent.cursors.ready()]);

    const records: OpRecord[] = [];
    // Successful writes per kind, in all and since the promotion (counted as records arrive).
    let promotedAt = Infinity;
    const okWrites = { total: new Map<string, number>(), sincePromotion: new Map<string, number>() };
    const receive = (batch: OpRecord[]) => {
      records.push(...batch);
      for (const [kind, outcome, start] of batch) {
        if (outcome !== 'ok') continue;
        okWrites.total.set(kind, (okWrites.total.get(kind) ?? 0) + 1);
        if (start >= promotedAt) okWrites.sincePromotion.set(kind, (okWrites.sincePromotion.get(kind) ?? 0) + 1);
      }
    };
    const params: LoadParams = {
      url,
      schema,
      timeoutMs: budget.timeoutMs,
      hangMs: 2 * budget.timeoutMs + 5000,
      kvCounter: KV_COUNTER,
      snapshotCounter: SNAPSHOT_COUNTER,
      lockKeys: Array.from({ length: budget.lockKeys }, (_, i) => `hot-${i}`),
      lockTtl: budget.lockTtl,
      lockWait: budget.lockTtl * 2,
      idempotencyTtl: 120_000,
      processName: PROCESS,
      processLease: budget.processLease,
      itemEveryMs: budget.itemEveryMs,
    };
    const workerTarget: BackendTarget = { ...target, url, label: `${target.label} (failover proxy)` };
    for (let index = 0; index < budget.processes; index++) {
      workers.push(
        startWorker<LoadResult>(workerTarget, 'failover-load', params, {
          index,
          hardLimitMs: budget.timeLimitMs + 60_000,
          onEvent: (event) => receive((event as LoadEvent).records),
        }),
      );
    }
    const deadline = Date.now() + budget.timeLimitMs;
    // A worker that fails or exits early ends the check at once.
    let workerFailed: unknown;
    for (const worker of workers) worker.result.catch((error: unknown) => (workerFailed ??= error));
    const waitFor = async (what: string, done: () => boolean) => {
      while (!done()) {
        if (workerFailed !== undefined) throw workerFailed;
        if (Date.now() > deadline) throw new Error(`${what}: not within ${formatMs(budget.timeLimitMs)}`);
        await sleep(50);
      }
    };
    const everyWriteKind = (counts: Map<string, number>, n: number) => WRITE_KINDS.every((kind) => (counts.get(kind) ?? 0) >= n);

    // Warm: every kind of write has succeeded a number of times through the primary.
    await waitFor('warm-up', () => everyWriteKind(okWrites.total, budget.warmOps));
    // A lock holder whose lease spans the failover, on a key of its own.
    const acrossBefore = await holdAcross(parent, parentGuard, budget.lockTtl);

    const killedAt = hostClock();
    await clusters.killPrimary();
    const deadAt = hostClock();
    // The proxy's health check notices and moves to the standby, before the standby is promoted.
    proxy.retarget(endpoint(clusters.standby));
    const switchedAt = hostClock();
    const probe = await readOnlyProbe(url, schema, budget.timeoutMs);
    const promoteAt = hostClock();
    await clusters.promote();
    promotedAt = hostClock();

    // The load goes on through the new primary.
    const acrossAfter = await acrossBefore.afterFailover(budget.lockTtl * 3 + 2 * budget.timeoutMs);
    await waitFor('load after the promotion', () => everyWriteKind(okWrites.sincePromotion, budget.afterOps));
    for (const worker of workers) worker.tell('stop-load');
    const direct = openStores(storeOptions(clusters.standby, schema, budget.timeoutMs));
    let unfinished = -1;
    try {
      const drainDeadline = Date.now() + budget.drainLimitMs;
      for (;;) {
        unfinished = await countUnfinished(direct);
        if (unfinished === 0 || Date.now() > drainDeadline) break;
        await sleep(200);
      }
      for (const worker of workers) worker.tell('finish');
      const results = await Promise.all(workers.map((worker) => worker.result));
      const figures = await verify(direct, results, { url: clusters.standby, schema, lockKeys: params.lockKeys, killedAt, switchedAt });

      // --- the table ---
      const failures = records.filter((r) => !ANSWERS.has(r[1]));
      const code = (r: OpRecord) => r[1].split(' ')[0]!;
      const writesThrough = records.filter((r) => (WRITE_KINDS as readonly string[]).includes(r[0]) && r[1] === 'ok' && r[2] >= switchedAt);
      const answeredAt = writesThrough.reduce((first, r) => Math.min(first, r[3]), Infinity);
      const wrongType = failures.filter((r) => !RETRYABLE.has(code(r)));
      const afterAnswer = failures.filter((r) => r[2] > answeredAt);
      const beforeKill = failures.filter((r) => r[3] < killedAt);
      const hung = failures.filter((r) => r[1] === 'hung');
      const during = failures.filter((r) => r[3] >= killedAt && r[2] <= answeredAt);
      const byCode = new Map<string, number>();
      for (const r of during) byCode.set(code(r), (byCode.get(code(r)) ?? 0) + 1);

      report.info(CHECK, label(`load: ${budget.processes} OS processes through the proxy, calls answered`), records.filter((r) => ANSWERS.has(r[1])).length);
      report.expect(
        CHECK,
        label(`writes to the standby before promotion → E_UNAVAILABLE/${READ_ONLY}`),
        `${probe.readOnly}/${probe.writes}`,
        `= ${probe.writes}/${probe.writes}`,
        probe.readOnly === probe.writes,
      );
      report.info(CHECK, label('reads served by the standby before promotion'), `${probe.readsOk}/${probe.reads}`);
      report.info(
        CHECK,
        label('primary killed → first write through the new primary'),
        Number.isFinite(answeredAt) ? formatMs(answeredAt - killedAt) : 'none',
      );
      report.info(
        CHECK,
        label('… shutdown / proxy switch + probe / promote → first write'),
        [deadAt - killedAt, promoteAt - deadAt, answeredAt - promoteAt].map(formatMs).join(' / '),
      );
      const readOnly = during.filter((r) => r[1].includes(READ_ONLY)).length;
      report.info(
        CHECK,
        label('failed calls during the switch, by code'),
        `${[...byCode].map(([c, n]) => `${c} ${n}`).join(', ') || 'none'} (${readOnly} read-only ${READ_ONLY})`,
      );
      report.expect(CHECK, label('failed calls during the switch (the failover took effect)'), during.length, '≥ 1', during.length >= 1);
      report.expect(CHECK, label('failed calls not E_UNAVAILABLE/E_TIMEOUT'), wrongType.length, '= 0', wrongType.length === 0);
      const workerErrors = results.flatMap((r) => r.workerErrors);
      const workerWrongType = workerErrors.filter((outcome) => !RETRYABLE.has(outcome.split(' ')[0]!));
      report.expect(
        CHECK,
        label(`worker error events not E_UNAVAILABLE/E_TIMEOUT (of ${workerErrors.length})`),
        workerWrongType.length,
        '= 0',
        workerWrongType.length === 0,
      );
      report.expect(CHECK, label('failed calls started after the new primary answered'), afterAnswer.length, '= 0', afterAnswer.length === 0);
      report.expect(CHECK, label('failed calls before the kill'), beforeKill.length, '= 0', beforeKill.length === 0);
      report.expect(CHECK, label(`calls hung (> ${formatMs(params.hangMs)})`), hung.length, '= 0', hung.length === 0);
      report.expect(CHECK, label('unhandled rejections'), unhandled.count - unhandledBefore, '= 0', unhandled.count === unhandledBefore);
      for (const [what, short, counter] of [
        ['kv compareAndSet increments', 'kv increments', figures.kv],
        ['snapshot expectedVersion increments', 'snapshot increments', figures.snapshots],
      ] as const) {
        report.expect(CHECK, label(`${what} lost (of ${counter.acked} acknowledged)`), counter.lost, '= 0', counter.lost === 0);
        report.expect(
          CHECK,
          label(`${short} applied unanswered (of ${counter.unanswered} unanswered)`),
          counter.applied,
          `0 … ${counter.unanswered}`,
          counter.applied >= 0 && counter.applied <= counter.unanswered,
        );
      }
      report.expect(CHECK, label(`idempotency completions lost (of ${figures.idempotency.completed} acknowledged)`), figures.idempotency.lost, '= 0', figures.idempotency.lost === 0);
      report.expect(CHECK, label(`idempotency keys with two winners (of ${figures.idempotency.keys} won)`), figures.idempotency.twoWinners, '= 0', figures.idempotency.twoWinners === 0);
      report.expect(CHECK, label('idempotency results seen that are not the winner’s'), figures.idempotency.disagreeing, '= 0', figures.idempotency.disagreeing === 0);
      report.info(CHECK, label('idempotency reservations unanswered (claimed until their ttl)'), figures.idempotency.unanswered);
      report.expect(CHECK, label(`fences out of acquisition order per key (${figures.locks.grants} grants)`), figures.locks.orderViolations, '= 0', figures.locks.orderViolations === 0);
      report.expect(
        CHECK,
        label('per key, lowest fence after − highest before the failover'),
        Number.isFinite(figures.locks.jump) ? figures.locks.jump : 'no key granted on both sides',
        '≥ 1',
        Number.isFinite(figures.locks.jump) && figures.locks.jump >= 1,
      );
      report.expect(
        CHECK,
        label('a lease from before the kill, taken again after: fences'),
        `${acrossAfter.firstFence} → ${acrossAfter.secondFence}`,
        'increasing',
        acrossAfter.secondFence > acrossAfter.firstFence,
      );
      report.expect(
        CHECK,
        label('… fenced writes: first / second / first again, late'),
        [acrossAfter.firstWrite, acrossAfter.secondWrite, acrossAfter.lateWrite].map((v) => (v.accepted ? 'accepted' : 'refused')).join(' / '),
        'accepted / accepted / refused',
        acrossAfter.firstWrite.accepted && acrossAfter.secondWrite.accepted && !acrossAfter.lateWrite.accepted && acrossAfter.overlaps === 0,
      );
      report.expect(CHECK, label('stale-fence writes accepted by the guard'), figures.locks.staleAccepted, '= 0', figures.locks.staleAccepted === 0);
      report.expect(CHECK, label('overlapping lock holders'), figures.locks.overlaps, '= 0', figures.locks.overlaps === 0);
      report.expect(CHECK, label("current holder's fenced writes rejected"), figures.locks.validRejected, '= 0', figures.locks.validRejected === 0);
      report.expect(
        CHECK,
        label('fenced writes accepted = guard counter'),
        `${figures.locks.accepted} = ${figures.locks.guardWrites}`,
        'equal',
        figures.locks.accepted === figures.locks.guardWrites,
      );
      report.info(CHECK, label('stale fenced writes rejected (lease ran out in the switch)'), figures.locks.staleRejected);
      report.expect(CHECK, label(`process items lost (of ${figures.items.created} acknowledged)`), figures.items.lost, '= 0', figures.items.lost === 0);
      report.expect(CHECK, label(`process items unfinished ${formatMs(budget.drainLimitMs)} after the load`), unfinished, '= 0', unfinished === 0);
      report.expect(CHECK, label(`process items advanced twice (of ${figures.items.total})`), figures.items.advancedTwice, '= 0', figures.items.advancedTwice === 0);
      report.expect(CHECK, label('process items dead-lettered'), figures.items.failed, '= 0', figures.items.failed === 0);
      report.info(CHECK, label('handler calls repeated (at-least-once) / transition conflicts'), `${figures.items.repeats} / ${figures.items.conflicts}`);
      report.info(CHECK, label('duration'), formatMs(performance.now() - started));

      const examples = new Map<string, OpRecord>();
      for (const r of [...wrongType, ...afterAnswer, ...beforeKill, ...hung]) examples.set(`${r[0]} ${r[1]}`, r);
      for (const [what, r] of [...examples].slice(0, 10)) {
        report.note(`failover: ${what} (started ${formatMs(r[2] - killedAt)} after the kill, took ${formatMs(r[3] - r[2])})`);
      }
      for (const outcome of new Set(workerWrongType)) report.note(`failover: process worker reported ${outcome}`);
      if (unhandled.count > unhandledBefore) report.note(`failover: last unhandled rejection: ${unhandled.last}`);
    } finally {
      await closeStores(direct);
    }
  } finally {
    for (const worker of workers) worker.kill('SIGKILL');
    if (parent) await closeStores(parent);
    await parentGuard?.close();
    await proxy.close();
    await clusters.stop();
  }
}

/**
 * A lock taken, and written under, on the primary just before it dies. After the failover the
 * lease runs out; the next holder must get a higher fence from the new primary, and the first
 * holder's write, coming late, must be refused by the guard.
 */
async function holdAcross(stores: Stores, guard: ReconnectingGuard, ttl: number) {
  const key = 'across-the-failover';
  const figures: GuardFigures = { accepted: 0, overlaps: 0, staleAccepted: 0, validRejected: 0, staleRejected: 0, retries: 0 };
  const asked = hostClock();
  const first = await stores.locks.acquire(key, ttl);
  if (first === null) throw new Error(`${key} was not free`);
  const firstHolder = holderOf(first, ttl, asked, hostClock());
  const firstWrite = await guard.write(key, firstHolder, figures);
  return {
    afterFailover: async (wait: number) => {
      const askedAgain = hostClock();
      const second = await untilAvailable(() => stores.locks.acquire(key, ttl, { wait }));
      if (second === null) throw new Error(`${key} was not granted again within ${formatMs(wait)}`);
      const secondWrite = await guard.write(key, holderOf(second, ttl, askedAgain, hostClock()), figures);
      const lateWrite = await guard.write(key, firstHolder, figures);
      await untilAvailable(() => second.release());
      return { firstFence: first.fence, secondFence: second.fence, firstWrite, secondWrite, lateWrite, overlaps: figures.overlaps };
    },
  };
}

/** Items of the load's process not yet in a terminal state (on the new primary). */
async function countUnfinished(stores: Stores): Promise<number> {
  let count = 0;
  for (const state of ['a', 'b', 'c'] as const) count += (await stores.machine.list({ state, limit: 1000 })).length;
  return count;
}

/**
 * Through the proxy, now pointing at the standby that has not been promoted: every kind of
 * write must fail with `E_UNAVAILABLE` whose cause is the server's read-only answer (25006),
 * and reads are answered.
 */
async function readOnlyProbe(url: string, schema: string, timeoutMs: number) {
  const stores = openStores(storeOptions(url, schema, timeoutMs));
  const writes: (() => Promise<unknown>)[] = [
    () => stores.kv.set('probe', 'x'),
    () => stores.kv.compareAndSet(KV_COUNTER, '-1', 1),
    () => stores.snapshots.save('probe', { count: 0 }),
    () => stores.locks.acquire('probe', 1000),
    () => stores.idempotency.reserve('probe', 1000),
    () => stores.machine.start('probe', {}),
  ];
  const reads: (() => Promise<unknown>)[] = [() => stores.kv.getEntry(KV_COUNTER), () => stores.snapshots.loadVersioned(SNAPSHOT_COUNTER)];
  let readOnly = 0;
  let readsOk = 0;
  try {
    for (const write of writes) {
      // The first call of a new pool may still meet a connection the switch reset: retried.
      for (let attempt = 0; attempt < 3; attempt++) {
        const outcome = await settleWithin(2 * timeoutMs + 5000, write);
        if (outcome.status !== 'rejected') break;
        const error = outcome.reason;
        const cause = isStowageError(error) ? (error.cause as { code?: unknown } | undefined)?.code : undefined;
        if (isStowageError(error, 'E_UNAVAILABLE') && cause === READ_ONLY) {
          readOnly += 1;
          break;
        }
        if (!isStowageError(error, 'E_UNAVAILABLE')) {
          console.error(`[reliability] failover probe: a write to the standby failed with ${outcomeOf(error)}: ${describeError(error)}`);
          break;
        }
      }
    }
    for (const read of reads) {
      const outcome = await settleWithin(2 * timeoutMs + 5000, read);
      if (outcome.status === 'fulfilled') readsOk += 1;
    }
  } finally {
    await closeStores(stores);
  }
  return { writes: writes.length, readOnly, reads: reads.length, readsOk };
}

/** What the new primary holds, against what the workers had acknowledged. */
async function verify(
  stores: Stores,
  results: LoadResult[],
  at: { url: string; schema: string; lockKeys: string[]; killedAt: number; switchedAt: number },
) {
  const kvFinal = Number(await stores.kv.get(KV_COUNTER));
  const snapshotFinal = Number((await stores.snapshots.load(SNAPSHOT_COUNTER))?.count);
  const kv = counterFigures(
    results.flatMap((r) => r.kvAcked),
    kvFinal,
    results.reduce((n, r) => n + r.kvUnknown, 0),
  );
  const snapshots = counterFigures(
    results.flatMap((r) => r.snapshotAcked),
    snapshotFinal,
    results.reduce((n, r) => n + r.snapshotUnknown, 0),
  );

  // Idempotency: one winner per key, and its result stored.
  const winners = new Map<string, number[]>();
  for (const [key, winner] of results.flatMap((r) => r.idempotencyWins)) winners.set(key, [...(winners.get(key) ?? []), winner]);
  const stored = new Map<string, number | undefined>();
  const completed = results.flatMap((r) => r.idempotencyCompleted);
  for (const key of new Set([...completed, ...results.flatMap((r) => r.idempotencySeen.map(([k]) => k))])) {
    stored.set(key, (await stores.idempotency.get<{ winner: number }>(key))?.value.winner);
  }
  const completedBy = new Map<string, number>();
  results.forEach((r, index) => r.idempotencyCompleted.forEach((key) => completedBy.set(key, index)));
  const idempotency = {
    keys: winners.size,
    completed: completed.length,
    lost: completed.filter((key) => stored.get(key) !== completedBy.get(key)).length,
    twoWinners: [...winners.values()].filter((list) => list.length > 1).length,
    disagreeing: results.flatMap((r) => r.idempotencySeen).filter(([key, winner]) => stored.get(key) !== winner).length,
    unanswered: results.reduce((n, r) => n + r.idempotencyUnknown, 0),
  };

  // Locks: fence order over every grant, and the jump across the failover.
  const grants: Grant[] = results.flatMap((r) => r.grants);
  const guard = new ReconnectingGuard(at.url, at.schema);
  let guardWrites = 0;
  try {
    for (const key of at.lockKeys) guardWrites += (await guard.read(key)).state.writes;
  } finally {
    await guard.close();
  }
  const locks = {
    grants: grants.length,
    orderViolations: fenceOrderViolations(grants),
    jump: fenceJump(grants, at.killedAt, at.switchedAt),
    accepted: results.reduce((n, r) => n + r.guard.accepted, 0),
    staleAccepted: results.reduce((n, r) => n + r.guard.staleAccepted, 0),
    overlaps: results.reduce((n, r) => n + r.guard.overlaps, 0),
    validRejected: results.reduce((n, r) => n + r.guard.validRejected, 0),
    staleRejected: results.reduce((n, r) => n + r.guard.staleRejected, 0),
    guardWrites,
  };

  // Process items: every acknowledged creation there, each stay handled into exactly one transition.
  const present = new Set<string>();
  let advancedTwice = 0;
  let failed = 0;
  for await (const item of stores.machine.scan()) {
    present.add(item.id);
    if (item.state === 'failed') failed += 1;
    const history = await stores.machine.history(item.id);
    const moves = history.filter((entry) => entry.kind !== 'create').map((entry) => entry.from);
    if (new Set(moves).size !== moves.length) advancedTwice += 1;
  }
  const created = results.flatMap((r) => r.itemsCreated);
  const items = {
    created: created.length,
    total: present.size,
    lost: created.filter((id) => !present.has(id)).length,
    advancedTwice,
    failed,
    repeats: results.reduce((n, r) => n + r.handlerRepeats, 0),
    conflicts: results.reduce((n, r) => n + r.conflicts, 0),
  };
  return { kv, snapshots, idempotency, locks, items };
}

/**
 * Per key, the lowest fence granted after the switch (asked for through the proxy once it led
 * to the standby) minus the highest granted before the kill; the smallest over the keys.
 */
function fenceJump(grants: readonly Grant[], killedAt: number, switchedAt: number): number {
  let smallest = Infinity;
  for (const key of new Set(grants.map((grant) => grant[0]))) {
    const before = grants.filter((g) => g[0] === key && g[3] < killedAt).reduce((highest, g) => Math.max(highest, g[1]), -Infinity);
    const after = grants.filter((g) => g[0] === key && g[2] > switchedAt).reduce((lowest, g) => Math.min(lowest, g[1]), Infinity);
    if (Number.isFinite(before) && Number.isFinite(after)) smallest = Math.min(smallest, after - before);
  }
  return smallest;
}

/** Acknowledged writes of every kind, in the order they were made. */
interface Acknowledged {
  kv: number[];
  snapshots: number[];
  idempotency: string[];
  fences: number[];
  items: string[];
}

/** `count` acknowledged writes of every kind, one after the other (the parent alone: nothing else writes). */
async function writeRound(stores: Stores, tag: string, count: number): Promise<Acknowledged> {
  const acked: Acknowledged = { kv: [], snapshots: [], idempotency: [], fences: [], items: [] };
  for (let i = 0; i < count; i++) {
    const entry = (await stores.kv.getEntry(KV_COUNTER))!;
    await stores.kv.compareAndSet(KV_COUNTER, String(Number(entry.value) + 1), entry.version);
    acked.kv.push(Number(entry.value) + 1);
    const snapshot = (await stores.snapshots.loadVersioned(SNAPSHOT_COUNTER))!;
    await stores.snapshots.save(SNAPSHOT_COUNTER, { count: snapshot.snapshot.count + 1 }, { expectedVersion: snapshot.version });
    acked.snapshots.push(snapshot.snapshot.count + 1);
    const key = `${tag}-${i}`;
    const reservation = await stores.idempotency.reserve(key, 120_000);
    if (reservation.status !== 'acquired') throw new Error(`idempotency key ${key} was not free`);
    await stores.idempotency.complete(key, reservation.token, { winner: 0 });
    acked.idempotency.push(key);
    const handle = await stores.locks.acquire(FENCED, 60_000);
    if (handle === null) throw new Error(`${FENCED} was not free`);
    acked.fences.push(handle.fence);
    await handle.release();
    await stores.machine.start(key, {});
    acked.items.push(key);
  }
  return acked;
}

/** How many of `acked` the (new) primary does not have. */
async function lostOf(stores: Stores, acked: Acknowledged) {
  const kvFinal = Number(await stores.kv.get(KV_COUNTER));
  const snapshotFinal = Number((await stores.snapshots.load(SNAPSHOT_COUNTER))?.count);
  let idempotency = 0;
  for (const key of acked.idempotency) if ((await stores.idempotency.get(key)) === null) idempotency += 1;
  let items = 0;
  for (const id of acked.items) if ((await stores.machine.get(id)) === null) items += 1;
  const kv = counterFigures(acked.kv, kvFinal, 0).lost;
  const snapshots = counterFigures(acked.snapshots, snapshotFinal, 0).lost;
  return { kv, snapshots, idempotency, items, total: kv + snapshots + idempotency + items };
}

const FENCED = 'fenced';

/**
 * The other direction: an asynchronous standby that is behind. Replication is stopped on the
 * standby (`primary_conninfo = ''`), so it is behind for certain by every write made after
 * that; the primary acknowledges them alone, dies, and the standby is promoted. Every one of
 * those writes is gone, the lock's fence sequence starts below fences already handed out, and
 * idempotency keys that had completed can be won again.
 */
async function asynchronousLoss(target: BackendTarget, report: BackendReport, budget: Budget['failover']): Promise<void> {
  const label = (text: string) => `async: ${text}`;
  const started = performance.now();
  const schema = target.namespace;
  const clusters = await Clusters.start('async');
  const proxy = await TcpProxy.start(endpoint(clusters.primary));
  let stores: Stores | undefined;
  try {
    const url = proxy.rewriteUrl(clusters.primary);
    stores = openStores(storeOptions(url, schema, budget.timeoutMs));
    await stores.kv.set(KV_COUNTER, '0');
    await stores.snapshots.save(SNAPSHOT_COUNTER, { count: 0 });
    const before = await writeRound(stores, 'before', 10);
    // Everything so far is on the standby; from here on nothing reaches it.
    await replayedEverything(clusters);
    await stopReplication(clusters);
    const after = await writeRound(stores, 'after', budget.asyncWrites);
    const behind = await admin(clusters.primary, async (client) => (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn() AS lsn')).rows[0]!.lsn);
    const behindBytes = await admin(clusters.standby, async (client) =>
      Number((await client.query<{ bytes: string }>('SELECT pg_wal_lsn_diff($1, pg_last_wal_replay_lsn()) AS bytes', [behind])).rows[0]!.bytes),
    );

    await clusters.killPrimary();
    proxy.retarget(endpoint(clusters.standby));
    await clusters.promote();

    // On the new primary, through the proxy: the application's view. Fresh stores: what is
    // measured is the data, not how the old pool meets its dead connections (the sync part does).
    await closeStores(stores);
    stores = openStores(storeOptions(url, schema, budget.timeoutMs));
    const promoted = stores;
    const lostBefore = await untilAvailable(() => lostOf(promoted, before));
    const lostAfter = await untilAvailable(() => lostOf(promoted, after));
    const afterCount = 4 * budget.asyncWrites;
    const handle = await untilAvailable(() => promoted.locks.acquire(FENCED, 60_000));
    const newFence = handle?.fence ?? NaN;
    await handle?.release();
    const fencesAgain = [...before.fences, ...after.fences].filter((fence) => fence >= newFence).length;
    let secondWinners = 0;
    for (const key of after.idempotency) {
      if ((await untilAvailable(() => promoted.idempotency.reserve(key, 120_000))).status === 'acquired') secondWinners += 1;
    }

    report.info(CHECK, label('replication stopped, then acknowledged by the primary alone'), `${budget.asyncWrites} × 4 kinds, ${budget.asyncWrites} lock grants`);
    report.info(CHECK, label('WAL the standby lacked when the primary died'), `${behindBytes} bytes`);
    report.expect(
      CHECK,
      label('acknowledged writes lost: before / after replication stopped'),
      `${lostBefore.total} / ${lostAfter.total}`,
      `0 / ${afterCount} (all)`,
      lostBefore.total === 0 && lostAfter.total === afterCount,
    );
    report.info(
      CHECK,
      label('… kv / snapshot increments, idempotency results, items'),
      [lostAfter.kv, lostAfter.snapshots, lostAfter.idempotency, lostAfter.items].join(' / '),
    );
    report.expect(
      CHECK,
      label(`fences granted before ≥ the new primary's next one (${newFence})`),
      fencesAgain,
      '≥ 1 (fences went back)',
      fencesAgain >= 1,
    );
    report.expect(CHECK, label('completed idempotency keys won a second time'), `${secondWinners}/${budget.asyncWrites}`, `= ${budget.asyncWrites}/${budget.asyncWrites}`, secondWinners === budget.asyncWrites);
    report.info(CHECK, label('duration'), formatMs(performance.now() - started));
  } finally {
    if (stores) await closeStores(stores);
    await proxy.close();
    await clusters.stop();
  }
}

/**
 * `fn`, again while it fails with `E_UNAVAILABLE`/`E_TIMEOUT` (up to 10 times, 200 ms apart): the
 * parent's own calls after the failover, as an application retries them. The load's calls are
 * never retried here: their failures are what the sync part counts.
 */
async function untilAvailable<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (attempt >= 10 || !(isStowageError(error, 'E_UNAVAILABLE') || isStowageError(error, 'E_TIMEOUT'))) throw error;
      await sleep(200);
    }
  }
}

/** Waits until the standby has replayed everything the primary has written so far. */
async function replayedEverything(clusters: Clusters): Promise<void> {
  const lsn = await admin(clusters.primary, async (client) => (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn() AS lsn')).rows[0]!.lsn);
  await admin(clusters.standby, async (client) => {
    for (let i = 0; i < 600; i++) {
      const { rows } = await client.query<{ done: boolean }>('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS done', [lsn]);
      if (rows[0]!.done) return;
      await sleep(50);
    }
    throw new Error(`the standby did not replay up to ${lsn} within 30 s`);
  });
}

/** Stops the standby's WAL receiver (an empty primary_conninfo) and waits until the primary has no WAL sender left. */
async function stopReplication(clusters: Clusters): Promise<void> {
  await admin(clusters.standby, async (client) => {
    await client.query(`ALTER SYSTEM SET primary_conninfo = ''`);
    await client.query('SELECT pg_reload_conf()');
  });
  await admin(clusters.primary, async (client) => {
    for (let i = 0; i < 600; i++) {
      const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_replication');
      if (rows[0]!.n === 0) return;
      await sleep(50);
    }
    throw new Error('the primary still streams to the standby 30 s after its primary_conninfo was cleared');
  });
}

