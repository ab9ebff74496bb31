/**
 * Resource leaks: a worker process runs many create → use → close cycles over every contract,
 * half of them on a pool/client of its own that it passes in (which stowage must leave open
 * and clean). Then it closes what it owns and simply returns.
 *
 * Proves: no timer (ref'd or unref'd), socket or process listener is left behind; no client
 * is left checked out of the caller's pool and no listener is left on it; no connection to the
 * database stays open (seen from the process's own sockets, and from the server's
 * pg_stat_activity where there is one); and the process exits by itself.
 */
import { createHook } from 'node:async_hooks';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import type { Budget } from '../config.ts';
import type { BackendReport } from '../report.ts';
import type { Backend, OpenOptions } from '../backends/types.ts';
import { withClient } from '../backends/pg-admin.ts';
import { formatMs, sleep } from '../util.ts';
import { startWorker, type Role } from '../workers.ts';

export interface LeakParams {
  cycles: number;
  applicationName: string;
  dbPort: number | null;
  deadline: number;
}

export interface LeakResult {
  cycles: number;
  /** Live async resources by type that were not there before the cycles (Timeout, TCPWRAP, …). */
  grownResources: Record<string, number>;
  /** Process-level listeners added and not removed, by event. */
  grownProcessListeners: Record<string, number>;
  /** Listeners added to the caller's pool/client and not removed, by event. */
  grownSharedListeners: Record<string, number>;
  sharedCheckedOut: number;
  openDbSockets: number;
  durationMs: number;
}

/** Counts live async resources by type, ref'd or not (getActiveResourcesInfo misses unref'd timers). */
function trackResources() {
  const live = new Map<number, string>();
  const tracked = new Set(['Timeout', 'Immediate', 'TCPWRAP', 'TCPCONNECTWRAP', 'PIPEWRAP', 'TLSWRAP', 'FSREQCALLBACK', 'GETADDRINFOREQWRAP']);
  const hook = createHook({
    init(id, type) {
      if (tracked.has(type)) live.set(id, type);
    },
    destroy(id) {
      live.delete(id);
    },
  }).enable();
  return {
    counts(): Record<string, number> {
      const counts: Record<string, number> = {};
      for (const type of live.values()) counts[type] = (counts[type] ?? 0) + 1;
      return counts;
    },
    stop: () => hook.disable(),
  };
}

function grown(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const result: Record<string, number> = {};
  for (const [name, count] of Object.entries(after)) {
    const delta = count - (before[name] ?? 0);
    if (delta > 0) result[name] = delta;
  }
  return result;
}

function processListeners(): Record<string, number> {
  return Object.fromEntries(process.eventNames().map((name) => [String(name), process.listenerCount(name)]));
}

/** Sockets of this process connected to `port` on the loopback (from /proc, so nothing the runtime hides). */
export function openSocketsTo(port: number): number {
  const inodes = new Set<string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (match) inodes.add(match[1]!);
    } catch {
      // the fd closed while we looked
    }
  }
  let count = 0;
  for (const table of ['/proc/self/net/tcp', '/proc/self/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10) continue;
      const remotePort = parseInt(fields[2]!.split(':')[1]!, 16);
      if (remotePort === port && inodes.has(fields[9]!)) count += 1;
    }
  }
  return count;
}

export const leakCycles: Role<LeakParams, LeakResult> = async (backend, params, context) => {
  const started = performance.now();
  const resources = trackResources();
  const shared = await backend.sharedConnection();
  // Let connection set-up settle before taking the baseline.
  await sleep(200);
  const resourcesBefore = resources.counts();
  const listenersBefore = processListeners();
  const sharedBefore = shared?.listenerCounts() ?? {};

  let cycles = 0;
  for (; cycles < params.cycles && Date.now() < params.deadline; cycles++) {
    const open: OpenOptions = { applicationName: params.applicationName, ...(shared && cycles % 2 === 1 ? { shared } : {}) };
    const name = `leak-${cycles}`;
    // Two operations per cycle keep 1,000 cycles affordable on a slow server; the namespace is dropped at the end.
    switch (Math.floor(cycles / 2) % 4) {
      case 0: {
        const kv = await backend.kv(open);
        await kv.set(name, 'x', { ttl: 60_000 });
        await kv.get(name);
        await kv.close();
        break;
      }
      case 1: {
        const snapshots = await backend.snapshots(open);
        await snapshots.save(name, { cycle: cycles });
        await snapshots.load(name);
        await snapshots.close();
        break;
      }
      case 2: {
        const locks = await backend.locks(open);
        // withLock (with its extension timer and abort signal) every other time, acquire/release otherwise.
        if (cycles % 4 === 0) await locks.withLock(name, async () => undefined, { ttl: 5000 });
        else await (await locks.acquire(name, 5000))?.release();
        await locks.close();
        break;
      }
      case 3: {
        const cache = await backend.cache(open);
        await cache.getOrSet(name, async () => ({ cycle: cycles }), 60_000);
        await cache.has(name);
        await cache.close();
        break;
      }
    }
    if (cycles % 100 === 0) context.emit({ cycles });
  }

  const sharedAfter = shared?.listenerCounts() ?? {};
  const sharedCheckedOut = shared?.checkedOut() ?? 0;
  await shared?.close();
  // Sockets finish closing and timers are destroyed on later turns of the event loop: give
  // them up to 5 s to get back to the baseline.
  let grownResources: Record<string, number> = {};
  let openDbSockets = 0;
  for (let attempt = 0; attempt < 50; attempt++) {
    await sleep(100);
    grownResources = grown(resourcesBefore, resources.counts());
    openDbSockets = params.dbPort === null ? 0 : openSocketsTo(params.dbPort);
    if (Object.keys(grownResources).length === 0 && openDbSockets === 0) break;
  }
  const result: LeakResult = {
    cycles,
    grownResources,
    grownProcessListeners: grown(listenersBefore, processListeners()),
    grownSharedListeners: grown(sharedBefore, sharedAfter),
    sharedCheckedOut,
    openDbSockets,
    durationMs: performance.now() - started,
  };
  resources.stop();
  return result;
};

const describe = (counts: Record<string, number>) =>
  Object.keys(counts).length === 0 ? 'none' : Object.entries(counts).map(([name, n]) => `${name} +${n}`).join(', ');

export async function resourceLeaks(backend: Backend, report: BackendReport, budget: Budget['leaks']): Promise<void> {
  const check = 'resource leaks';
  const applicationName = `stowage-reliability-leaks-${process.pid}`;
  const worker = startWorker<LeakResult>(
    backend.target,
    'leak-cycles',
    { cycles: budget.cycles, applicationName, dbPort: backend.address?.port ?? null, deadline: Date.now() + budget.timeLimitMs } satisfies LeakParams,
    { hardLimitMs: budget.timeLimitMs + 30_000 },
  );
  const result = await worker.result;
  const exitedByItself = await worker.exitsWithin(10_000);
  const shared = backend.crossProcess ? 'half with a pool/client passed in' : 'in-memory';
  report.expect(check, `create/use/close cycles (${shared})`, result.cycles, `= ${budget.cycles}`, result.cycles === budget.cycles);
  report.expect(check, 'timers/sockets/handles left behind', describe(result.grownResources), 'none', Object.keys(result.grownResources).length === 0);
  report.expect(check, 'process listeners left behind', describe(result.grownProcessListeners), 'none', Object.keys(result.grownProcessListeners).length === 0);
  if (backend.crossProcess) {
    report.expect(check, "listeners left on the caller's pool/client", describe(result.grownSharedListeners), 'none', Object.keys(result.grownSharedListeners).length === 0);
    report.expect(check, "clients left checked out of the caller's pool", result.sharedCheckedOut, '= 0', result.sharedCheckedOut === 0);
    report.expect(check, 'sockets to the database still open (client side)', result.openDbSockets, '= 0', result.openDbSockets === 0);
  }
  if (backend.target.name === 'postgres') {
    const sessions = await serverSessions(backend.target.url!, applicationName);
    report.expect(check, 'sessions in pg_stat_activity after the worker (server side)', sessions, '= 0', sessions === 0);
  }
  report.expect(check, 'worker process exited by itself', exitedByItself ? 'yes' : 'no (killed after 10 s)', 'yes', exitedByItself);
  report.info(check, 'duration', formatMs(result.durationMs));
}

/** Sessions the worker left on the server; backends end asynchronously, so give them a few seconds. */
async function serverSessions(url: string, applicationName: string): Promise<number> {
  return withClient(url, async (client) => {
    let count = Infinity;
    for (let attempt = 0; attempt < 50 && count > 0; attempt++) {
      const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1`, [applicationName]);
      count = Number(rows[0]!.n);
      if (count > 0) await sleep(100);
    }
    return count;
  });
}
