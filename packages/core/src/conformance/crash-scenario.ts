import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { expect } from 'vitest';
import type { KeyValueStore } from '../contracts/kv.js';
import type { HandlerContext, ProcessBackend, ProcessItem } from '../contracts/process.js';
import { bindProcess } from '../process/bind.js';
import { defineProcess } from '../process/define.js';
import { sleep } from './helpers.js';
import { allFinished, historyProblems, itemIds, listAllItems, waitUntil } from './process-helpers.js';

/*
 * `@stowage/core/conformance/crash`: the multi-OS-process crash test (SIGKILL) for a
 * ProcessBackend. An adapter package runs it with its own worker script: the script calls
 * {@link runCrashTestWorker}, the test calls {@link runProcessCrashScenario} and asserts with
 * {@link expectCrashScenarioInvariants}.
 */

/** The process the crash test runs: `received -> checked -> applied -> done`, dead-letter `failed`. */
export const CRASH_TEST_PROCESS = 'crash-test';
const CRASH_TEST_STATES = ['received', 'checked', 'applied'] as const;

/** One line a crash-test worker prints on stdout (JSON). */
export type CrashTestLine =
  | { t: 'ready'; worker: string; pid: number }
  /** A handler started. */
  | { t: 'begin'; worker: string; item: string; state: string; key: string; attempt: number }
  /** The worker wrote the handler's outcome (or learned it lost the item): the stay is no longer in flight here. */
  | { t: 'settled'; worker: string; item: string; state: string; outcome: string }
  | { t: 'stopped'; worker: string; handedBack: number };

export interface CrashTestWorkerOptions {
  backend: ProcessBackend;
  cursors: KeyValueStore;
  name: string;
  /** Per-state concurrency (default 3). */
  concurrency?: number;
  /**
   * How long each handler works, in ms (default 200): long enough to be killed in the middle even
   * when a loaded bound reads the worker's "begin" line late (at 50 ms a kill once landed after
   * the handler had finished).
   */
  workMs?: number;
  /** Lease per claim (default 5000): a loaded CI bound must not let leases run out mid-handler. */
  lease?: number;
}

function crashTestDefinition(options: { concurrency?: number; workMs?: number; lease?: number }, onCall?: (line: CrashTestLine) => void) {
  const workMs = options.workMs ?? 200;
  const handler = (next: string) => async (item: ProcessItem, context: HandlerContext) => {
    onCall?.({ t: 'begin', worker: context.worker, item: item.id, state: item.state, key: context.idempotencyKey, attempt: context.attempt });
    await sleep(workMs);
    return next as 'done';
  };
  const concurrency = options.concurrency ?? 3;
  return defineProcess({
    name: CRASH_TEST_PROCESS,
    initial: 'received',
    lease: options.lease ?? 5000,
    retry: { maxAttempts: 10, backoff: { initial: 50, max: 500 } },
    states: {
      received: { concurrency, handler: handler('checked') },
      checked: { concurrency, handler: handler('applied') },
      applied: { concurrency, handler: handler('done') },
    },
    terminal: ['done', 'failed'],
  });
}

/**
 * The body of a crash-test worker process: runs every state of the crash-test process until
 * SIGTERM/SIGINT, printing a JSON line when it is ready, when each handler begins and ends,
 * and when it stopped. stdout on a pipe is synchronous, so a line printed before a SIGKILL
 * is never lost.
 */
export async function runCrashTestWorker(options: CrashTestWorkerOptions): Promise<void> {
  const print = (line: CrashTestLine) => process.stdout.write(`${JSON.stringify(line)}\n`);
  const definition = crashTestDefinition(options, print);
  const worker = bindProcess(options.backend, definition).worker({
    name: options.name,
    cursors: options.cursors,
    pollInterval: 200,
    cursorInterval: 100,
    onEvent: (event) => {
      switch (event.type) {
        case 'advanced':
        case 'conflict':
        case 'retry':
        case 'waiting':
        case 'dead-lettered':
        case 'handed-back':
          print({ t: 'settled', worker: options.name, item: event.itemId, state: event.state, outcome: event.type });
          break;
        case 'error':
          process.stderr.write(`[${options.name}] ${event.during}: ${String(event.error)}\n`);
          break;
        case 'stopped':
          print({ t: 'stopped', worker: options.name, handedBack: event.handedBack });
          break;
      }
    },
  });
  // run() installs the SIGTERM/SIGINT handlers as soon as start() resolves, before "ready" is printed.
  const running = worker.run();
  await worker.start();
  print({ t: 'ready', worker: options.name, pid: process.pid });
  await running;
}

export interface CrashScenarioOptions {
  /** A backend on the same database the workers use (for creating and checking items). */
  backend: ProcessBackend;
  /** Starts a worker OS process running {@link runCrashTestWorker} under `name`, with stdout piped. */
  spawnWorker(name: string): ChildProcess;
  /** Items to run (default 60). */
  items?: number;
  /** Worker processes (default 3). */
  workers?: number;
  /** How many times a worker is SIGKILLed mid-item and restarted (default 2). */
  kills?: number;
  /** Liveness bound for the whole run, in ms (default 120000). */
  timeout?: number;
  log?: (message: string) => void;
}

export interface CrashScenarioResult {
  items: number;
  workers: number;
  kills: number;
  /** Handler calls seen on the workers' stdout. */
  handlerCalls: number;
  /** Calls beyond the first per (item, state): the at-least-once redeliveries. */
  duplicates: number;
  /** Items (in a state) that were in a killed worker's handler when it died. */
  inFlightAtKills: number;
  /** Items per final state. */
  finalStates: Record<string, number>;
  /** Items whose history breaks an invariant, with what is wrong. */
  historyProblems: Record<string, string[]>;
  /** Redeliveries of an (item, state) that no killed worker had in flight: must be none. */
  unexplainedDuplicates: string[];
}

interface WorkerProcess {
  name: string;
  child: ChildProcess;
  /** Resolves once the process exited and its stdout was read to the end. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  ready: Promise<void>;
  /** Stays (state + item) whose handler began here and whose outcome was not written yet. */
  open: Set<string>;
  /** Called on every handler start. */
  onBegin?: () => void;
}

/**
 * The multi-process crash test: starts `workers` OS processes on one database, feeds them
 * items (half before they start, half while they run), SIGKILLs a worker in the middle of a
 * handler `kills` times and restarts it under the same name, waits for every item to reach
 * a terminal state, stops everyone with SIGTERM, and reports what the handlers saw. The
 * caller asserts on the result (see {@link expectCrashScenarioInvariants}).
 */
export async function runProcessCrashScenario(options: CrashScenarioOptions): Promise<CrashScenarioResult> {
  const itemCount = options.items ?? 60;
  const workerCount = options.workers ?? 3;
  const kills = options.kills ?? 2;
  const timeout = options.timeout ?? 120_000;
  const log = options.log ?? (() => undefined);
  const bound = bindProcess(options.backend, crashTestDefinition({}));
  const begun = new Map<string, number>();
  const inFlightAtKill = new Set<string>();
  let inFlightAtKills = 0;
  let handlerCalls = 0;
  const running = new Map<string, WorkerProcess>();

  const launch = (name: string): WorkerProcess => {
    const child = options.spawnWorker(name);
    if (!child.stdout) throw new Error('spawnWorker must pipe stdout');
    const open = new Set<string>();
    let markReady!: () => void;
    const ready = new Promise<void>((resolve) => (markReady = resolve));
    // 'close' (not 'exit'): fires after stdout was read to the end, so no line printed before a SIGKILL is missed.
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('close', (code, signal) => resolve({ code, signal })),
    );
    createInterface({ input: child.stdout }).on('line', (text) => {
      let line: CrashTestLine;
      try {
        line = JSON.parse(text) as CrashTestLine;
      } catch {
        log(`[${name}] ${text}`);
        return;
      }
      if (line.t === 'ready') markReady();
      if (line.t === 'begin') {
        handlerCalls++;
        const key = `${line.state}\u0000${line.item}`;
        begun.set(key, (begun.get(key) ?? 0) + 1);
        open.add(key);
        worker.onBegin?.();
      }
      if (line.t === 'settled') open.delete(`${line.state}\u0000${line.item}`);
    });
    const worker: WorkerProcess = { name, child, exited, ready, open };
    running.set(name, worker);
    return worker;
  };

  const deadline = performance.now() + timeout;
  const within = async <T>(promise: Promise<T>, what: string): Promise<T> => {
    const remaining = deadline - performance.now();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`crash scenario: gave up waiting until ${what}`)), Math.max(0, remaining));
    });
    try {
      return await Promise.race([promise, expired]);
    } finally {
      clearTimeout(timer);
    }
  };

  const ids = itemIds(itemCount, 'crash');
  // One batch waits before the workers start; each kill gets a fresh batch started just before
  // it, so there is always work in flight to interrupt, however fast (or slow to start) the
  // workers were.
  const batchSize = Math.ceil(itemCount / (kills + 1));
  const batches = Array.from({ length: kills + 1 }, (_, i) => ids.slice(i * batchSize, (i + 1) * batchSize));
  const startBatch = async (batch: string[]) => {
    for (const id of batch) await bound.start(id, { id });
  };
  try {
    await startBatch(batches[0]!);
    const names = Array.from({ length: workerCount }, (_, i) => `crash-worker-${i}`);
    await within(Promise.all(names.map((name) => launch(name).ready)), 'every worker is ready');
    log(`${workerCount} workers ready; ${batches[0]!.length} items were waiting`);

    for (let kill = 0; kill < kills; kill++) {
      // Kill whichever worker begins a handler first: it is then certainly in the middle of an item.
      const begins = [...running.values()].map(
        (worker) => new Promise<WorkerProcess>((resolve) => (worker.onBegin = () => resolve(worker))),
      );
      await startBatch(batches[kill + 1]!);
      const victim = await within(Promise.race(begins), 'a worker begins a handler');
      for (const worker of running.values()) worker.onBegin = undefined;
      victim.child.kill('SIGKILL');
      const { signal } = await within(victim.exited, `${victim.name} died`);
      const lost = [...victim.open];
      inFlightAtKills += lost.length;
      for (const key of lost) inFlightAtKill.add(key);
      log(`SIGKILL ${victim.name} (${signal}) in the middle of ${lost.length} handler(s): ${lost.map((key) => key.replace('\u0000', ' ')).join(', ')}`);
      await within(launch(victim.name).ready, `${victim.name} restarted`);
      log(`${victim.name} restarted`);
    }

    await within(
      waitUntil(() => allFinished(bound, ids), 'every item finished', timeout),
      'every item finished',
    );
  } finally {
    for (const worker of running.values()) worker.child.kill('SIGTERM');
  }
  const exits = await within(Promise.all([...running.values()].map((worker) => worker.exited)), 'the workers exited after SIGTERM');
  for (const [index, exit] of exits.entries()) {
    const name = [...running.keys()][index];
    if (exit.code !== 0) throw new Error(`worker ${name} exited with ${exit.code ?? exit.signal} after SIGTERM`);
  }

  const finalStates: Record<string, number> = {};
  const problems: Record<string, string[]> = {};
  for (const item of await listAllItems(bound)) {
    finalStates[item.state] = (finalStates[item.state] ?? 0) + 1;
    const found = historyProblems(await bound.history(item.id), bound.definition.terminal);
    if (found.length > 0) problems[item.id] = found;
  }
  let duplicates = 0;
  const unexplained: string[] = [];
  for (const [key, count] of begun) {
    if (count <= 1) continue;
    duplicates += count - 1;
    if (!inFlightAtKill.has(key)) unexplained.push(key.replace('\u0000', ' '));
  }
  const expected = CRASH_TEST_STATES.length * itemCount;
  if (handlerCalls < expected) throw new Error(`only ${handlerCalls} handler calls for ${expected} stays`);
  return {
    items: itemCount,
    workers: workerCount,
    kills,
    handlerCalls,
    duplicates,
    inFlightAtKills,
    finalStates,
    historyProblems: problems,
    unexplainedDuplicates: unexplained,
  };
}

/**
 * The crash test's invariants: every item done, reaching its terminal state exactly once; no
 * item advanced twice; every kill interrupted a handler. With `exclusiveClaims` (a backend
 * whose claims are atomic), also: handlers ran again only for work a killed worker had in
 * flight, at most once per such stay.
 */
export function expectCrashScenarioInvariants(result: CrashScenarioResult, options: { exclusiveClaims?: boolean } = {}): void {
  expect(result.finalStates, 'every item reached "done"').toEqual({ done: result.items });
  expect(result.historyProblems, 'histories (each item advanced once per state, terminal exactly once)').toEqual({});
  expect(result.inFlightAtKills, 'each kill interrupted at least one handler').toBeGreaterThanOrEqual(result.kills);
  expect(result.handlerCalls).toBe(result.items * CRASH_TEST_STATES.length + result.duplicates);
  if (options.exclusiveClaims ?? true) {
    expect(result.unexplainedDuplicates, 'handler redeliveries of work no killed worker had in flight').toEqual([]);
    expect(result.duplicates, 'redeliveries at most the work in flight at the kills').toBeLessThanOrEqual(result.inFlightAtKills);
  }
}
