/**
 * Lock safety: several clients hammer a few hot keys; every critical section writes to a
 * fenced resource (guard.ts) with its fencing token. Some holders freeze past their lease
 * before writing, so their tokens go stale while another client takes over.
 *
 * Proves: no two live leases on one key overlap; no write with a superseded token is accepted;
 * fences follow grant order; and the stale-token scenario actually happened (stale writes
 * were rejected), so the zeros above are not vacuous.
 */
import { isStowageError, type LockHandle } from '@stowage/core';
import type { Budget } from '../config.ts';
import { guardedWrite, hostClock, leaveGuard, type GuardStore, type Holder } from '../guard.ts';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { formatMs, freezeProcess, pick, randomInt, sleep } from '../util.ts';
import { runWorkers, type Role } from '../workers.ts';
import { rawListenLeaks, startPlainClients, wakeupsAfterReady, type PlainClients } from './pooler.ts';

export interface ContenderParams {
  keys: string[];
  acquisitions: number;
  ttl: number;
  pauseProbability: number;
  pauseOvershoot: [number, number];
  withLockShare: number;
  /** Freeze the whole process (OS-process workers) rather than await a timer (in-process workers). */
  freeze: boolean;
  deadline: number;
}

/** [key, fence, acquire called, acquire returned] (host monotonic clock, ms). */
export type Grant = [string, number, number, number];

export interface ContenderResult {
  acquisitions: number;
  waitTimeouts: number;
  paused: number;
  leaseLostReported: number;
  writesAccepted: number;
  staleRejected: number;
  staleAccepted: number;
  validRejected: number;
  overlaps: number;
  /** Where the time went, in ms: waiting for locks, inside critical sections, frozen. */
  waitingMs: number;
  sectionMs: number;
  frozenMs: number;
  grants: Grant[];
}

export const lockContender: Role<ContenderParams, ContenderResult> = async (backend, params) => {
  const locks = await backend.locks();
  const guard = await backend.guard();
  const result: ContenderResult = {
    acquisitions: 0,
    waitTimeouts: 0,
    paused: 0,
    leaseLostReported: 0,
    writesAccepted: 0,
    staleRejected: 0,
    staleAccepted: 0,
    validRejected: 0,
    overlaps: 0,
    waitingMs: 0,
    sectionMs: 0,
    frozenMs: 0,
    grants: [],
  };
  // Long enough to outlast a frozen holder, so a waiter normally gets the lock.
  const wait = params.ttl * 2 + params.pauseOvershoot[1];
  try {
    while (result.acquisitions < params.acquisitions && Date.now() < params.deadline) {
      const key = pick(params.keys);
      const pause = Math.random() < params.pauseProbability ? params.ttl + randomInt(...params.pauseOvershoot) : 0;
      // An awaited pause does not stop withLock's auto-extension, so it could never lose the
      // lease: in-process workers pause only on plain acquisitions.
      const useWithLock = (params.freeze || pause === 0) && Math.random() < params.withLockShare;
      const asked = hostClock();
      const section = async (handle: LockHandle) => {
        const entered = hostClock();
        result.waitingMs += entered - asked;
        await criticalSection(guard, handle, key, { start: asked, end: entered }, params, pause, result);
        result.sectionMs += hostClock() - entered;
      };
      if (useWithLock) {
        try {
          await locks.withLock(key, async (_signal, handle) => section(handle), { ttl: params.ttl, wait, pollInterval: 10 });
        } catch (error) {
          if (isStowageError(error, 'E_LOCK_BUSY')) result.waitTimeouts += 1;
          else if (isStowageError(error, 'E_LOCK_LOST')) result.leaseLostReported += 1;
          else throw error;
        }
      } else {
        const handle = await locks.acquire(key, params.ttl, { wait, pollInterval: 10 });
        if (handle === null) {
          result.waitTimeouts += 1;
          result.waitingMs += hostClock() - asked;
          continue;
        }
        await section(handle);
        await handle.release();
      }
    }
  } finally {
    await locks.close();
    await guard.close();
  }
  return result;
};

async function criticalSection(
  guard: GuardStore,
  handle: LockHandle,
  key: string,
  acquisition: { start: number; end: number },
  params: ContenderParams,
  pause: number,
  result: ContenderResult,
): Promise<void> {
  result.acquisitions += 1;
  const grant = handle.expiresAt.getTime() - params.ttl;
  result.grants.push([key, handle.fence, acquisition.start, acquisition.end]);
  if (pause > 0) {
    result.paused += 1;
    result.frozenMs += pause;
    if (params.freeze) freezeProcess(pause);
    else await sleep(pause);
  }
  const me: Holder = { owner: handle.owner, fence: handle.fence, grant, expires: handle.expiresAt.getTime(), ...acquisition };
  const verdict = await guardedWrite(guard, key, me);
  if (verdict.overlap) result.overlaps += 1;
  if (verdict.accepted) {
    result.writesAccepted += 1;
    if (verdict.stale) result.staleAccepted += 1;
    // In-process workers only interleave where they await: give the critical section some
    // length so that a broken lock's overlaps show (OS processes have real concurrency).
    if (!params.freeze) await sleep(randomInt(0, 1));
    await leaveGuard(guard, key, me);
  } else if (verdict.later) {
    result.validRejected += 1;
  } else {
    result.staleRejected += 1;
  }
}

/**
 * Per key, fences must be distinct, and an acquisition that returned before another was even
 * called must hold the lower fence (real-time order on the host clock; acquisitions that
 * overlapped in time may come in either order). Returns the number of violations.
 */
export function fenceOrderViolations(grants: readonly Grant[]): number {
  const byKey = new Map<string, Grant[]>();
  for (const grant of grants) byKey.set(grant[0], [...(byKey.get(grant[0]) ?? []), grant]);
  let violations = 0;
  for (const list of byKey.values()) {
    list.sort((a, b) => a[1] - b[1]);
    // Walking from the highest fence down, keep the earliest return seen among higher fences.
    let earliestReturnAbove = Infinity;
    for (let i = list.length - 1; i >= 0; i--) {
      const [, fence, called, returned] = list[i]!;
      if (i + 1 < list.length && list[i + 1]![1] === fence) violations += 1;
      // A higher fence returned before this lower one was even asked for.
      if (earliestReturnAbove < called) violations += 1;
      earliestReturnAbove = Math.min(earliestReturnAbove, returned);
    }
  }
  return violations;
}

export interface LockFigures {
  target: number;
  acquisitions: number;
  overlaps: number;
  staleAccepted: number;
  validRejected: number;
  fenceOrderViolations: number;
  paused: number;
  staleRejected: number;
  leaseLostReported: number;
  waitTimeouts: number;
  writesAccepted: number;
  /** Sum of the guard records' counters: must equal writesAccepted. */
  guardWrites: number;
  durationMs: number;
}

/** Runs the contenders and adds up what they saw. */
export async function measureLockSafety(backend: Backend, budget: Budget['lock']): Promise<LockFigures> {
  const keys = Array.from({ length: budget.hotKeys }, (_, i) => `hot-${i}`);
  // Create the guard table before any worker opens it.
  await (await backend.guard()).close();
  const started = performance.now();
  const params: ContenderParams = {
    keys,
    acquisitions: budget.acquisitionsPerProcess,
    ttl: budget.ttl,
    pauseProbability: budget.pauseProbability,
    pauseOvershoot: budget.pauseOvershoot,
    withLockShare: budget.withLockShare,
    freeze: backend.crossProcess,
    deadline: Date.now() + budget.timeLimitMs,
  };
  const results = await runWorkers<ContenderParams, ContenderResult>(backend, 'lock-contender', lockContender, budget.processes, () => params, {
    hardLimitMs: budget.timeLimitMs + 30_000,
  });
  const sum = (field: keyof Omit<ContenderResult, 'grants'>) => results.reduce((total, r) => total + r[field], 0);
  console.log(
    `[reliability]   lock time per worker: waiting ${formatMs(sum('waitingMs') / results.length)}, in sections ${formatMs(sum('sectionMs') / results.length)} (frozen ${formatMs(sum('frozenMs') / results.length)})`,
  );
  const guard = await backend.guard();
  let guardWrites = 0;
  try {
    for (const key of keys) guardWrites += (await guard.read(key)).state.writes;
  } finally {
    await guard.close();
  }
  return {
    target: budget.processes * budget.acquisitionsPerProcess,
    acquisitions: sum('acquisitions'),
    overlaps: sum('overlaps'),
    staleAccepted: sum('staleAccepted'),
    validRejected: sum('validRejected'),
    fenceOrderViolations: fenceOrderViolations(results.flatMap((r) => r.grants)),
    paused: sum('paused'),
    staleRejected: sum('staleRejected'),
    leaseLostReported: sum('leaseLostReported'),
    waitTimeouts: sum('waitTimeouts'),
    writesAccepted: sum('writesAccepted'),
    guardWrites,
    durationMs: performance.now() - started,
  };
}

export async function lockSafety(backend: Backend, report: BackendReport, budget: Budget['lock']): Promise<void> {
  const check = 'lock safety';
  // Behind a transaction pooler: wake-ups must be found unavailable, and no NOTIFY may reach
  // the pooler's other clients while the locks are hammered (see pooler.ts).
  const pooler = backend.target.name === 'pgbouncer';
  let plain: PlainClients | null = null;
  if (pooler) {
    const wakeups = await wakeupsAfterReady(backend);
    report.expect(check, 'wake-ups through the pooler (capabilities.wakeups after ready())', wakeups ? 'on' : 'off', 'off (polling)', !wakeups);
    const leaked = await rawListenLeaks(backend.target.url!, `${backend.target.namespace}_leak_probe`);
    report.expect(check, 'detector: raw LISTEN through the pooler → notifications to plain clients', leaked, '≥ 1', leaked >= 1);
    plain = await startPlainClients(backend.target.url!, 3);
  }
  let f: LockFigures;
  let seen: Awaited<ReturnType<PlainClients['stop']>> | undefined;
  try {
    f = await measureLockSafety(backend, budget);
  } finally {
    seen = await plain?.stop();
  }
  const who = backend.crossProcess
    ? `${budget.processes} OS processes × ${budget.acquisitionsPerProcess}`
    : `${budget.processes} async workers × ${budget.acquisitionsPerProcess} (one process: memory is not cross-process)`;
  report.expect(check, `acquisitions over ${budget.hotKeys} hot keys, ${who}`, f.acquisitions, `= ${f.target}`, f.acquisitions === f.target);
  report.expect(check, 'overlapping live leases observed', f.overlaps, '= 0', f.overlaps === 0);
  report.expect(check, 'stale-token writes accepted', f.staleAccepted, '= 0', f.staleAccepted === 0);
  report.expect(check, "current holder's writes rejected", f.validRejected, '= 0', f.validRejected === 0);
  report.expect(check, 'fences out of acquisition order (per key)', f.fenceOrderViolations, '= 0', f.fenceOrderViolations === 0);
  report.expect(
    check,
    'holders frozen past their lease → stale writes rejected',
    `${f.paused} → ${f.staleRejected}`,
    'rejected ≥ 1',
    f.staleRejected >= 1,
  );
  report.expect(check, 'fenced writes accepted = guard counter', `${f.writesAccepted} = ${f.guardWrites}`, 'equal', f.writesAccepted === f.guardWrites);
  report.info(check, 'withLock calls that reported E_LOCK_LOST', f.leaseLostReported);
  report.info(check, 'acquire waits that timed out (retried)', f.waitTimeouts);
  if (seen) {
    report.expect(check, `notifications leaked to other pooler clients (${seen.transactions} transactions)`, seen.notifications, '= 0', seen.notifications === 0);
    if (seen.notifications > 0) report.note(`lock safety: plain pooler clients received notifications on ${seen.channels.join(', ')}`);
  }
  report.info(check, 'duration', formatMs(f.durationMs));
}
