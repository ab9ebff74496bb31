/**
 * Outages: stowage talks to the database through a TCP proxy (proxy.ts) that the test cuts
 * and restores while several loaders run a mix of operations (kv set/get, snapshot save,
 * lock acquire/release, cache set). Two kinds of cut: `reset` (connections refused — the
 * server went away) and `blackhole` (packets vanish — a partition; only client timeouts help).
 * Where it is safe, the real Postgres server is also restarted under load.
 *
 * Proves: every operation that fails, fails with StowageError E_UNAVAILABLE or E_TIMEOUT, and
 * within its configured timeout; nothing hangs; no promise rejects unhandled; every kind of
 * operation works again after the restore without the application doing anything; and every
 * write that was acknowledged is still there.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { isStowageError, type CacheProvider, type JsonObject, type KeyValueStore, type LockProvider, type SnapshotStore } from '@stowage/core';
import { isCI } from '@stowage/test-env';
import type { Budget } from '../config.ts';
import { TcpProxy, isLoopback, type CutMode } from '../proxy.ts';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend, OpenOptions } from '../backends/types.ts';
import { formatMs, settleWithin, sleep } from '../util.ts';
import { APPLICATION_NAME, withClient } from '../backends/pg-admin.ts';

const run = promisify(execFile);

const OP_KINDS = ['kv.set', 'kv.get', 'snapshot.save', 'lock', 'cache.set'] as const;
type OpKind = (typeof OP_KINDS)[number];

interface OpRecord {
  kind: OpKind;
  start: number;
  end: number;
  /** 'ok', a StowageError code, 'hung', or 'other: …' for anything else. */
  outcome: string;
}

interface Stores {
  kv: KeyValueStore;
  snapshots: SnapshotStore<JsonObject>;
  locks: LockProvider;
  cache: CacheProvider;
}

/** Counted by main.ts's process-wide handler. */
export const unhandled = { count: 0, last: '' };

export interface OutageOptions {
  /** Restart the Postgres server under load: 'yes', or why not. */
  restartPostgres: true | string;
}

export async function outage(backend: Backend, report: BackendReport, budget: Budget['outage'], options: OutageOptions): Promise<void> {
  const check = 'outage';
  if (backend.address === null) {
    report.notApplicable(check, 'in-process adapter: there is no connection to cut');
    return;
  }
  if (backend.target.name === 'jongodb') {
    // Through the proxy the driver must connect directly (or it finds the server's own address
    // and goes around the proxy), and on a direct connection it reads with primaryPreferred.
    report.notApplicable(check, "jongodb refuses every read preference but 'primary', which a direct connection (needed to stay behind the proxy) does not send");
    return;
  }
  report.info(check, `client timeouts: ${backend.timeoutSettings ?? 'timeoutMs'} each`, formatMs(budget.timeoutMs));
  for (const mode of ['reset', 'blackhole'] as const) {
    const proxy = await TcpProxy.start(backend.address);
    try {
      await underLoad(backend, report, budget, `proxy cut (${mode})`, { url: proxy.rewriteUrl(proxyUrl(backend)) }, async () => {
        proxy.cut(mode as CutMode);
        await sleep(budget.cutMs);
        proxy.restore();
      });
    } finally {
      await proxy.close();
    }
  }
  if (backend.target.name === 'postgres') {
    if (options.restartPostgres === true) {
      const cluster = await restartableCluster(backend.target.url!);
      if (typeof cluster === 'string') {
        report.notApplicable(check, `server restart skipped: ${cluster}`);
      } else {
        let restartMs = 0;
        await underLoad(backend, report, budget, 'server restart', {}, async () => {
          const started = performance.now();
          await run('pg_ctlcluster', ['--skip-systemctl-redirect', cluster.version, cluster.name, 'restart'], { timeout: 60_000 });
          restartMs = performance.now() - started;
        });
        report.info(check, `server restart: pg_ctlcluster ${cluster.version} ${cluster.name} restart took`, formatMs(restartMs));
      }
    } else {
      report.notApplicable(check, `server restart skipped: ${options.restartPostgres}`);
    }
  }
}

/** The backend's URL; for MongoDB, pinned to the one host so the driver cannot route around the proxy. */
function proxyUrl(backend: Backend): string {
  const url = backend.target.url!;
  if (backend.target.name !== 'mongo' && backend.target.name !== 'jongodb') return url;
  const parsed = new URL(url);
  parsed.searchParams.set('directConnection', 'true');
  return parsed.toString();
}

async function openStores(backend: Backend, open: OpenOptions): Promise<Stores> {
  return {
    kv: await backend.kv(open),
    snapshots: await backend.snapshots(open),
    locks: await backend.locks(open),
    cache: await backend.cache(open),
  };
}

async function closeStores(stores: Stores, limitMs: number): Promise<number> {
  let hung = 0;
  for (const store of Object.values(stores) as { close(): Promise<void> }[]) {
    const outcome = await settleWithin(limitMs, () => store.close());
    if (outcome.status === 'hung') hung += 1;
  }
  return hung;
}

/**
 * Runs loaders, calls `disrupt` once they are warm, keeps loading until every kind of
 * operation has succeeded again (or the recovery limit passes), then checks what was acknowledged.
 */
async function underLoad(
  backend: Backend,
  report: BackendReport,
  budget: Budget['outage'],
  scenario: string,
  route: { url?: string },
  disrupt: () => Promise<void>,
): Promise<void> {
  const check = 'outage';
  const tag = scenario.replace(/[^a-z]+/g, '-');
  const open: OpenOptions = { ...route, timeoutMs: budget.timeoutMs };
  // Connect plus one operation, each bounded by the configured timeout; 1 s for scheduling.
  const rejectionBound = 2 * budget.timeoutMs + 1000;
  const hangBound = rejectionBound + 5000;
  const stores = await openStores(backend, open);
  const records: OpRecord[] = [];
  const acked = { kv: new Map<string, string>(), snapshots: new Map<string, number>(), cache: new Map<string, string>() };
  const unhandledBefore = unhandled.count;
  let stop = false;
  let cutAt = Infinity;
  let restoredAt = Infinity;

  const loader = async (loaderIndex: number) => {
    for (let seq = 0; !stop && seq < 100_000; seq++) {
      const kind = OP_KINDS[(seq + loaderIndex) % OP_KINDS.length]!;
      const name = `${tag}-${loaderIndex}-${seq}`;
      const start = performance.now();
      const outcome = await settleWithin(hangBound, async () => {
        switch (kind) {
          case 'kv.set': {
            const value = `value of ${name}`;
            await stores.kv.set(`ack:${name}`, value);
            acked.kv.set(`ack:${name}`, value);
            return;
          }
          case 'kv.get':
            await stores.kv.get(`ack:${tag}-${loaderIndex}-0`);
            return;
          case 'snapshot.save':
            await stores.snapshots.save(`ack:${name}`, { seq });
            acked.snapshots.set(`ack:${name}`, seq);
            return;
          case 'lock': {
            const handle = await stores.locks.acquire(`lock-${tag}-${loaderIndex}`, 10_000);
            await handle?.release();
            return;
          }
          case 'cache.set':
            await stores.cache.set(`ack:${name}`, name);
            acked.cache.set(`ack:${name}`, name);
            return;
        }
      });
      records.push({
        kind,
        start,
        end: performance.now(),
        outcome:
          outcome.status === 'fulfilled'
            ? 'ok'
            : outcome.status === 'hung'
              ? 'hung'
              : isStowageError(outcome.reason)
                ? outcome.reason.code
                : `other: ${describeError(outcome.reason)}`,
      });
      await sleep(outcome.status === 'fulfilled' ? 2 : 20);
    }
  };

  const loaders = Array.from({ length: budget.loaders }, (_, i) => loader(i));
  const recoveredAll = () =>
    OP_KINDS.every((kind) => records.some((r) => r.kind === kind && r.start >= restoredAt && r.outcome === 'ok'));
  let disruptError: unknown;
  try {
    await sleep(500);
    cutAt = performance.now();
    await disrupt().catch((error: unknown) => (disruptError = error));
    restoredAt = performance.now();
    const deadline = restoredAt + budget.recoveryLimitMs;
    while (!recoveredAll() && performance.now() < deadline) await sleep(50);
    await sleep(300);
  } finally {
    stop = true;
    await Promise.all(loaders);
  }
  if (disruptError !== undefined) throw disruptError;

  const hungCloses = await closeStores(stores, 10_000);
  const lost = await lostAcknowledged(backend, acked);

  // Affected: in flight at some point between the cut and the restore.
  const during = records.filter((r) => r.start < restoredAt && r.end >= cutAt);
  const before = records.filter((r) => r.end < cutAt);
  const failedBefore = before.filter((r) => r.outcome !== 'ok');
  const rejected = records.filter((r) => r.outcome !== 'ok' && r.outcome !== 'hung');
  const wrongType = rejected.filter((r) => r.outcome !== 'E_UNAVAILABLE' && r.outcome !== 'E_TIMEOUT');
  const hung = records.filter((r) => r.outcome === 'hung');
  const slowest = Math.max(0, ...rejected.map((r) => r.end - r.start));
  const count = (list: OpRecord[], outcome: string) => list.filter((r) => r.outcome === outcome).length;
  const recovery = OP_KINDS.map((kind) => {
    const first = records.find((r) => r.kind === kind && r.start >= restoredAt && r.outcome === 'ok');
    return first ? first.end - restoredAt : Infinity;
  });

  const label = (text: string) => `${scenario}: ${text}`;
  report.info(
    check,
    label(`ops in flight during it (${formatMs(restoredAt - cutAt)}): ok / E_UNAVAILABLE / E_TIMEOUT`),
    `${count(during, 'ok')} / ${count(during, 'E_UNAVAILABLE')} / ${count(during, 'E_TIMEOUT')}`,
  );
  const failedDuring = during.filter((r) => r.outcome !== 'ok').length;
  report.expect(check, label('ops that failed during it (it took effect)'), failedDuring, '≥ 1', failedDuring >= 1);
  report.expect(check, label('failures before it'), failedBefore.length, '= 0', failedBefore.length === 0);
  report.expect(check, label('rejections not E_UNAVAILABLE/E_TIMEOUT'), wrongType.length, '= 0', wrongType.length === 0);
  report.expect(check, label('slowest rejection'), formatMs(slowest), `≤ 2 × timeout + 1 s = ${formatMs(rejectionBound)}`, slowest <= rejectionBound);
  report.expect(check, label(`operations hung (> ${formatMs(hangBound)})`), hung.length, '= 0', hung.length === 0);
  report.expect(check, label('close() hung afterwards'), hungCloses, '= 0', hungCloses === 0);
  report.expect(check, label('unhandled rejections'), unhandled.count - unhandledBefore, '= 0', unhandled.count === unhandledBefore);
  const slowestRecovery = Math.max(...recovery);
  report.expect(
    check,
    label('every op kind working again after it'),
    Number.isFinite(slowestRecovery) ? formatMs(slowestRecovery) : `not within ${formatMs(budget.recoveryLimitMs)}`,
    `≤ ${formatMs(budget.recoveryLimitMs)}`,
    Number.isFinite(slowestRecovery),
  );
  const ackedCount = acked.kv.size + acked.snapshots.size + acked.cache.size;
  report.expect(check, label(`acknowledged writes lost (of ${ackedCount})`), lost.length, '= 0', lost.length === 0);

  const examples = new Map<string, OpRecord>();
  for (const r of [...failedBefore, ...wrongType, ...hung]) if (!examples.has(`${r.kind} ${r.outcome}`)) examples.set(`${r.kind} ${r.outcome}`, r);
  for (const [what, r] of examples) report.note(`outage ${scenario}: ${what} (after ${formatMs(r.end - r.start)})`);
  for (const key of lost.slice(0, 5)) report.note(`outage ${scenario}: acknowledged but missing: ${key}`);
  if (unhandled.count > unhandledBefore) report.note(`outage ${scenario}: last unhandled rejection: ${unhandled.last}`);
}

/** Reads back every acknowledged write over a fresh, direct connection. */
async function lostAcknowledged(
  backend: Backend,
  acked: { kv: Map<string, string>; snapshots: Map<string, number>; cache: Map<string, string> },
): Promise<string[]> {
  const stores = await openStores(backend, {});
  const lost: string[] = [];
  try {
    const keys = [...acked.kv.keys()];
    for (let i = 0; i < keys.length; i += 100) {
      const chunk = keys.slice(i, i + 100);
      const values = await stores.kv.getMany(chunk);
      chunk.forEach((key, j) => {
        if (values[j] !== acked.kv.get(key)) lost.push(`kv ${key}`);
      });
    }
    for (const [id, seq] of acked.snapshots) {
      const snapshot = await stores.snapshots.load(id);
      if (snapshot?.seq !== seq) lost.push(`snapshot ${id}`);
    }
    for (const [key, value] of acked.cache) {
      if ((await stores.cache.get(key)) !== value) lost.push(`cache ${key}`);
    }
  } finally {
    await closeStores(stores, 10_000);
  }
  return lost;
}

/**
 * The local cluster behind `url`, if restarting it is safe: it is on this machine, managed by
 * pg_ctlcluster (we are root), and nobody else is connected (another test run would see its
 * connections killed). Otherwise, why not.
 */
async function restartableCluster(url: string): Promise<{ version: string; name: string } | string> {
  if (!isLoopback(new URL(url).hostname)) return 'the server is not on this machine';
  if (process.getuid?.() !== 0) return 'pg_ctlcluster needs root';
  if (!existsSync('/usr/bin/pg_ctlcluster') || !existsSync('/usr/bin/pg_lsclusters')) return 'no pg_ctlcluster here';
  const port = new URL(url).port || '5432';
  const { stdout } = await run('pg_lsclusters', ['--no-header']);
  // Ver Cluster Port Status Owner Data-directory Log-file
  const line = stdout
    .split('\n')
    .map((text) => text.trim().split(/\s+/))
    .find((fields) => fields[2] === port && fields[3] === 'online');
  if (!line) return `no online pg_ctlcluster cluster listens on port ${port}`;
  const others = await withClient(url, async (client) => {
    const { rows } = await client.query<{ n: string }>(
      `SELECT count(*) AS n FROM pg_stat_activity
        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name NOT LIKE $1`,
      [`${APPLICATION_NAME}%`],
    );
    return Number(rows[0]!.n);
  });
  if (others > 0) return `${others} other client session(s) are connected to the server`;
  return { version: line[0]!, name: line[1]! };
}

export function restartPolicy(flag: boolean | undefined): true | string {
  if (flag === false) return 'disabled by --no-restart-postgres';
  if (flag === true || isCI) return true;
  return 'only under CI=true or with --restart-postgres (it would cut every other client of the server)';
}
