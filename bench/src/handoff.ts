/**
 * Lock hand-off under contention. Waiters are `acquire(key, ttl, { wait })` calls on one key,
 * all in one child process (one provider: one pool, one LISTEN connection), as an application
 * process with many tasks waiting for one lock; a second child process holds the key first
 * and lets it go. Every waiter takes the lock once per round and releases it at once. A
 * sample is the time from the previous holder calling `release()` to the next `acquire()`
 * resolving (process.hrtime: one clock for every process of the machine). Statements per
 * acquisition are every statement (or Mongo command) the waiters' process sent during the
 * round, counted from the driver, over the acquisitions: a waiter that tries once, is woken
 * once and releases needs 3.
 *
 * Targets (wake-ups): 64 waiters ≤ 3 statements per acquisition and p50 ≤ 5 ms, in one process
 * and, on PostgreSQL, spread over four processes (a process hands the lock on to the waiters
 * already in its line when it won it, without a NOTIFY); 256 waiters p50 ≤ 2× the 8-waiter p50.
 * Shown without a target: four processes on MongoDB (a release wakes one waiter per process),
 * and polling.
 *
 * The lock line at scale (go-go-scope or awaitly code with a hot key, a burst of requests all
 * waiting for it): 10,000 and 100,000 waiters join one process's line, each process fresh;
 * target: 100,000 enqueue in under 1 s. Joining and leaving cost the same per waiter at both
 * sizes when they are O(1).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { config } from './config.ts';
import type { FromChild, HandoffTarget, ToChild } from './handoff-child.ts';
import { check, ms } from './sections.ts';
import { percentile } from './stats.ts';
import type { Section, SectionRow, SectionTable } from './types.ts';

export const HANDOFF_TARGETS = { statementsAt64: 3, p50At64Ms: 5, p50GrowthAt256: 2 };
/** Waiters of the lock-line table, and the target: the largest line enqueues in under this. */
export const LINE_WAITERS = [10_000, 100_000];
export const LINE_ENQUEUE_TARGET_MS = 1_000;
const TTL = 30_000;
const ROUND_TIMEOUT_MS = 180_000;

interface Plan {
  waiters: number;
  processes: number;
  wakeups: boolean;
}

interface Measured {
  plan: Plan;
  samples: number[];
  acquisitions: number;
  statements: number;
  /** Statements by kind over the whole run (see handoff-child.ts). */
  byKind: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  wakeups: boolean;
}

class Child {
  readonly #process: ChildProcess;
  readonly #queue: FromChild[] = [];
  #waiting: ((message: FromChild) => void) | undefined;
  #exit: string | undefined;

  constructor(target: HandoffTarget) {
    const script = fileURLToPath(new URL('./handoff-child.ts', import.meta.url));
    this.#process = fork(script, [JSON.stringify(target)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.#process.on('message', (message: FromChild) => this.#push(message));
    this.#process.on('exit', (code) => {
      this.#exit = `a hand-off process exited with code ${code}`;
      this.#push({ type: 'error', message: this.#exit });
    });
  }

  #push(message: FromChild): void {
    if (this.#waiting) {
      const resolve = this.#waiting;
      this.#waiting = undefined;
      resolve(message);
    } else this.#queue.push(message);
  }

  send(message: ToChild): void {
    if (this.#exit === undefined) this.#process.send(message);
  }

  /** The next message, which must be of `type` (an error message rejects). */
  async next<T extends FromChild['type']>(type: T, timeoutMs = ROUND_TIMEOUT_MS): Promise<Extract<FromChild, { type: T }>> {
    let timer: NodeJS.Timeout | undefined;
    const message =
      this.#queue.shift() ??
      (await new Promise<FromChild>((resolve, reject) => {
        this.#waiting = resolve;
        timer = setTimeout(() => reject(new Error(`no '${type}' from a hand-off process within ${timeoutMs / 1000} s`)), timeoutMs);
      }).finally(() => clearTimeout(timer)));
    if (message.type === 'error') throw new Error(message.message);
    if (message.type !== type) throw new Error(`expected '${type}' from a hand-off process, got '${message.type}'`);
    return message as Extract<FromChild, { type: T }>;
  }

  async stop(): Promise<void> {
    if (this.#exit !== undefined) return;
    const exited = new Promise<void>((resolve) => this.#process.once('exit', () => resolve()));
    this.send({ cmd: 'stop' });
    const timer = setTimeout(() => this.#process.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

async function measure(target: (wakeups: boolean) => HandoffTarget, plan: Plan): Promise<Measured> {
  const holder = new Child(target(plan.wakeups));
  const waiters = Array.from({ length: plan.processes }, () => new Child(target(plan.wakeups)));
  const all = [holder, ...waiters];
  try {
    const ready = await Promise.all(all.map((child) => child.next('ready', 60_000)));
    const wakeups = ready.every((r) => r.wakeups);
    const rounds = Math.max(1, Math.ceil(config.handoffSamples / plan.waiters));
    const samples: number[] = [];
    let statements = 0;
    const byKind: Record<string, number> = {};
    for (let round = 0; round < rounds; round++) {
      const key = `handoff:${plan.waiters}x${plan.processes}:${plan.wakeups ? 'w' : 'p'}:${round}:${process.pid}`;
      holder.send({ cmd: 'hold', key, ttl: TTL });
      await holder.next('held');
      waiters.forEach((child, c) => {
        const count = Math.floor(plan.waiters / plan.processes) + (c < plan.waiters % plan.processes ? 1 : 0);
        child.send({ cmd: 'wait', key, waiters: count, ttl: TTL });
      });
      // every waiter has tried once and waits: the holder lets go at once (holding longer only
      // adds the waiters' polls to the count)
      await Promise.all(waiters.map((child) => child.next('waiting')));
      holder.send({ cmd: 'release' });
      const released = await holder.next('released');
      const done = await Promise.all(waiters.map((child) => child.next('done')));
      // the waiters' statements only: the holder's release belongs to an acquisition not counted here
      statements += done.reduce((sum, d) => sum + d.statements, 0);
      for (const d of done) for (const [kind, n] of Object.entries(d.byKind)) byKind[kind] = (byKind[kind] ?? 0) + n;
      const events = done.flatMap((d) => d.events).sort((a, b) => a.granted - b.granted);
      let previousRelease = released.releasing;
      for (const event of events) {
        samples.push(event.granted - previousRelease);
        previousRelease = event.releasing;
      }
    }
    return {
      plan,
      samples,
      acquisitions: samples.length,
      statements,
      byKind,
      p50: percentile(samples, 50),
      p99: percentile(samples, 99),
      max: Math.max(...samples),
      wakeups,
    };
  } finally {
    await Promise.all(all.map((child) => child.stop().catch(() => undefined)));
  }
}

const HEADER = ['waiters', 'mode', 'processes', 'samples', 'p50 ms', 'p99 ms', 'max ms', 'statements/acq'];

function cells(m: Measured): string[] {
  return [
    String(m.plan.waiters),
    m.wakeups ? 'wake-ups' : 'polling',
    String(m.plan.processes),
    String(m.samples.length),
    ms(m.p50),
    ms(m.p99),
    ms(m.max),
    (m.statements / m.acquisitions).toFixed(2),
  ];
}

function data(m: Measured): Record<string, unknown> {
  return { ...m.plan, wakeupsWorked: m.wakeups, samples: m.samples.length, p50Ms: m.p50, p99Ms: m.p99, maxMs: m.max, statements: m.statements, acquisitions: m.acquisitions, statementsByKind: m.byKind };
}

/**
 * The hand-off section of a backend; `target(wakeups)` says how a child process opens its
 * provider. `polling: false` when the provider has no switch to turn wake-ups off.
 */
export function handoffSection(target: (wakeups: boolean) => HandoffTarget, options: { polling: boolean }): Section {
  return {
    id: 'handoff',
    async run(log) {
      const table: SectionTable = {
        id: 'handoff',
        title:
          `lock hand-off: waiters on one key, each one acquire({ wait }), in one process; one sample per hand-off (targets: 64 waiters ≤ ${HANDOFF_TARGETS.statementsAt64} statements/acquisition and ` +
          `p50 ≤ ${HANDOFF_TARGETS.p50At64Ms} ms; 256 waiters p50 ≤ ${HANDOFF_TARGETS.p50GrowthAt256}× the 8-waiter p50)`,
        header: HEADER,
        align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r'],
        rows: [],
        notes: [],
      };
      const run = async (plan: Plan): Promise<Measured | null> => {
        const started = performance.now();
        try {
          const m = await measure(target, plan);
          log(
            `  hand-off ${plan.waiters} waiters, ${plan.processes} process(es), ${m.wakeups ? 'wake-ups' : 'polling'}: p50 ${ms(m.p50)} ms, ` +
              `${(m.statements / m.acquisitions).toFixed(2)} statements/acquisition (${((performance.now() - started) / 1000).toFixed(1)} s)`,
          );
          return m;
        } catch (error) {
          table.rows.push({ cells: [String(plan.waiters), plan.wakeups ? 'wake-ups' : 'polling', String(plan.processes), '-', '-', '-', '-', '-'], check: check(`hand-off ${plan.waiters} waiters runs`, 'no error', (error as Error).message, false) });
          return null;
        }
      };

      const sizes = config.handoffWaiters;
      const byWaiters = new Map<number, Measured>();
      for (const waiters of sizes) {
        const m = await run({ waiters, processes: 1, wakeups: true });
        if (m !== null) byWaiters.set(waiters, m);
      }
      // Where LISTEN (or a change stream) does not work, the provider polls: the targets still
      // apply, to what a user of this server gets (a release can wake a waiter of its own process).
      const wakeups = [...byWaiters.values()].every((m) => m.wakeups);
      if (!wakeups) table.notes.push('no wake-ups on this server (capabilities.wakeups = false): the providers poll every 50 ms; the targets apply as they are');
      const smallest = byWaiters.get(Math.min(...sizes));
      for (const [waiters, m] of byWaiters) {
        const row: SectionRow = { cells: cells(m), data: data(m) };
        const perAcquisition = m.statements / m.acquisitions;
        const kinds = Object.entries(m.byKind)
          .sort((a, b) => b[1] - a[1])
          .map(([kind, n]) => `${(n / m.acquisitions).toFixed(2)} ${kind}`);
        table.notes.push(`${waiters} waiters, statements per acquisition: ${kinds.join(', ')}`);
        if (waiters === 64) {
          const pass = perAcquisition <= HANDOFF_TARGETS.statementsAt64 && m.p50 <= HANDOFF_TARGETS.p50At64Ms;
          row.check = check('hand-off 64 waiters', `<= ${HANDOFF_TARGETS.statementsAt64} statements/acq, p50 <= ${HANDOFF_TARGETS.p50At64Ms} ms`, `${perAcquisition.toFixed(2)} statements/acq, p50 ${ms(m.p50)} ms`, pass);
        } else if (waiters === 256 && smallest !== undefined && smallest !== m) {
          const growth = m.p50 / smallest.p50;
          row.check = check('hand-off 256 waiters', `p50 <= ${HANDOFF_TARGETS.p50GrowthAt256}x the ${smallest.plan.waiters}-waiter p50`, `${growth.toFixed(2)}x (${ms(m.p50)} vs ${ms(smallest.p50)} ms)`, growth <= HANDOFF_TARGETS.p50GrowthAt256);
        } else {
          row.note = 'baseline of the 256-waiter target';
        }
        table.rows.push(row);
      }
      const informational: Plan[] = wakeups
        ? [
            ...(sizes.includes(64) ? [{ waiters: 64, processes: 4, wakeups: true }] : []),
            ...(options.polling ? [{ waiters: Math.min(...sizes), processes: 1, wakeups: false }] : []),
          ]
        : [];
      for (const plan of informational) {
        const m = await run(plan);
        if (m === null) continue;
        const row: SectionRow = { cells: cells(m), data: data(m) };
        if (!plan.wakeups) row.note = 'no target: polling every 50 ms';
        else if (target(true).kind === 'mongo') row.note = 'no target: a release wakes one waiter per process (MongoDB)';
        else {
          // PostgreSQL: a process hands the lock on to its waiters of the batch, unannounced.
          const perAcquisition = m.statements / m.acquisitions;
          row.check = check(
            'hand-off 64 waiters in 4 processes',
            `<= ${HANDOFF_TARGETS.statementsAt64} statements/acq, p50 <= ${HANDOFF_TARGETS.p50At64Ms} ms`,
            `${perAcquisition.toFixed(2)} statements/acq, p50 ${ms(m.p50)} ms`,
            perAcquisition <= HANDOFF_TARGETS.statementsAt64 && m.p50 <= HANDOFF_TARGETS.p50At64Ms,
          );
        }
        table.rows.push(row);
      }
      return [table, await lineTable(target, log)];
    },
  };
}

async function lineTable(target: (wakeups: boolean) => HandoffTarget, log: (line: string) => void): Promise<SectionTable> {
  const table: SectionTable = {
    id: 'lock-line',
    title: `lock line: n waiters on one held key join one provider's line, then close() makes them all leave (target: ${LINE_WAITERS.at(-1)!.toLocaleString('en')} enqueue in < ${LINE_ENQUEUE_TARGET_MS} ms)`,
    header: ['waiters', 'enqueue ms', 'µs/waiter', 'heap/waiter', 'all leave ms', 'µs/waiter'],
    align: ['r', 'r', 'r', 'r', 'r', 'r'],
    rows: [],
    notes: ['enqueued: the calling loop and one event-loop turn, in a fresh process; heap/waiter is heapUsed before and after, without a forced collection'],
  };
  for (const waiters of LINE_WAITERS) {
    const child = new Child(target(true));
    try {
      await child.next('ready', 60_000);
      child.send({ cmd: 'line', key: `line:${waiters}:${process.pid}`, waiters });
      const m = await child.next('line');
      log(`  lock line ${waiters} waiters: enqueued in ${ms(m.enqueueMs)} ms, left in ${ms(m.leaveMs)} ms`);
      const row: SectionRow = {
        cells: [waiters.toLocaleString('en'), ms(m.enqueueMs), ms((m.enqueueMs * 1000) / waiters), `${Math.round(m.heapBytes / waiters)} B`, ms(m.leaveMs), ms((m.leaveMs * 1000) / waiters)],
        data: { waiters, enqueueMs: m.enqueueMs, heapBytes: m.heapBytes, leaveMs: m.leaveMs },
      };
      if (waiters === LINE_WAITERS.at(-1)) row.check = check(`lock line ${waiters} waiters`, `enqueue < ${LINE_ENQUEUE_TARGET_MS} ms`, `${ms(m.enqueueMs)} ms`, m.enqueueMs < LINE_ENQUEUE_TARGET_MS);
      else row.note = 'no target: the per-waiter cost at a tenth of the size';
      table.rows.push(row);
    } catch (error) {
      table.rows.push({ cells: [waiters.toLocaleString('en'), '-', '-', '-', '-', '-'], check: check(`lock line ${waiters} waiters runs`, 'no error', (error as Error).message, false) });
    } finally {
      await child.stop().catch(() => undefined);
    }
  }
  return table;
}
