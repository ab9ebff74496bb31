import { expect } from 'vitest';
import type { BoundProcess, HandlerContext, ProcessItem, TransitionRecord } from '../contracts/process.js';
import { defineProcess } from '../process/define.js';
import { sleep } from './helpers.js';

/*
 * What the process cases (cases/process-backend.ts, cases/process-engine.ts) and the
 * multi-process crash test (crash-scenario.ts) share. `historyProblems` and `waitUntil` are
 * also exported for adapters' own tests.
 */

/** How long a process case may take: its workers wait out leases, and a case waits for a whole process to finish. */
export const PROCESS_CASE_TIMEOUT = 60_000;
/** How long a case waits for a process to finish before failing (a liveness bound, not a timing assertion). */
export const SETTLE_TIMEOUT = 40_000;
/**
 * Leases in the engine cases: long enough for any handler here even on a slow, loaded server
 * (a lease that runs out mid-handler is a legitimate redelivery, which would spoil the counts),
 * short enough to wait out after a kill.
 */
export const LEASE = 3000;
/** The process name the cases use. */
export const P = 'conformance';

/**
 * What is wrong with an item's transition log, if anything: it must start with its creation
 * at version 1, go up one version per entry, each entry leaving the state the previous one
 * entered (so no stay was left twice: no item advanced twice), and reach a terminal state
 * exactly once, as its last entry.
 */
export function historyProblems(history: readonly TransitionRecord[], terminal: readonly string[]): string[] {
  const problems: string[] = [];
  if (history.length === 0) return ['the history is empty'];
  history.forEach((entry, index) => {
    const previous = history[index - 1];
    if (entry.version !== index + 1) problems.push(`entry ${index} has version ${entry.version}, expected ${index + 1}`);
    if (index === 0 && (entry.kind !== 'create' || entry.from !== null)) problems.push('the first entry is not the creation');
    if (previous && entry.from !== previous.to) {
      problems.push(`entry ${index} leaves "${entry.from}" but the item was in "${previous.to}"`);
    }
  });
  const terminalEntries = history.filter((entry) => terminal.includes(entry.to));
  if (terminalEntries.length !== 1) problems.push(`reached a terminal state ${terminalEntries.length} times`);
  else if (!terminal.includes(history.at(-1)!.to)) problems.push('moved on after reaching a terminal state');
  return problems;
}

/** Polls `check` until it returns true; fails after `timeout` ms with `what` in the message. */
export async function waitUntil(check: () => Promise<boolean> | boolean, what: string, timeout = SETTLE_TIMEOUT): Promise<void> {
  const deadline = performance.now() + timeout;
  for (;;) {
    if (await check()) return;
    if (performance.now() > deadline) throw new Error(`gave up waiting (${timeout} ms) until ${what}`);
    await sleep(25);
  }
}

/** Every item of the process, across pages. */
export async function listAllItems(bound: BoundProcess): Promise<ProcessItem[]> {
  const items: ProcessItem[] = [];
  for (let after: string | undefined; ; ) {
    const page = await bound.list({ limit: 1000, ...(after !== undefined && { after }) });
    items.push(...page);
    if (page.length < 1000) return items;
    after = page.at(-1)!.id;
  }
}

/** True when every one of `ids` is listed, and in a terminal state. */
export async function allFinished(bound: BoundProcess, ids: readonly string[]): Promise<boolean> {
  const states = new Map((await listAllItems(bound)).map((item) => [item.id, item.state]));
  return ids.every((id) => bound.definition.terminal.includes(states.get(id) ?? ''));
}

/** `count` item ids that sort in creation order: `item-000`, `item-001`, … */
export const itemIds = (count: number, prefix = 'item'): string[] =>
  Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(3, '0')}`);

export interface HandlerCall {
  item: string;
  state: string;
  key: string;
  attempt: number;
  worker: string;
}

/** Records every handler call, for counting duplicates. */
export class CallLog {
  readonly calls: HandlerCall[] = [];
  record(item: ProcessItem, state: string, context: HandlerContext): void {
    this.calls.push({ item: item.id, state, key: context.idempotencyKey, attempt: context.attempt, worker: context.worker });
  }
  /** Calls beyond the first per (item, state). */
  duplicates(): HandlerCall[] {
    const seen = new Set<string>();
    return this.calls.filter((call) => {
      const key = `${call.state}\u0000${call.item}`;
      if (seen.has(key)) return true;
      seen.add(key);
      return false;
    });
  }
  of(item: string, state?: string): HandlerCall[] {
    return this.calls.filter((call) => call.item === item && (state === undefined || call.state === state));
  }
}

export function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

type Handler = (item: ProcessItem, context: HandlerContext) => Promise<unknown> | unknown;

/** a -> b -> done, with `failed` as the dead-letter state (`transactional`: state a); every handler call is logged in `calls`. */
export function abProcess(handlers: { a?: Handler; b?: Handler }, options: { concurrency?: number; maxAttempts?: number; transactional?: boolean } = {}) {
  const calls = new CallLog();
  const definition = defineProcess({
    name: P,
    initial: 'a',
    lease: LEASE,
    retry: { maxAttempts: options.maxAttempts ?? 3, backoff: { initial: 10, factor: 2, max: 100, jitter: 0 } },
    states: {
      a: {
        concurrency: options.concurrency ?? 4,
        transactional: options.transactional ?? false,
        handler: async (item, context) => {
          calls.record(item, 'a', context);
          return ((await handlers.a?.(item, context)) ?? 'b') as 'b';
        },
      },
      b: {
        concurrency: options.concurrency ?? 4,
        handler: async (item, context) => {
          calls.record(item, 'b', context);
          return ((await handlers.b?.(item, context)) ?? 'done') as 'done';
        },
      },
    },
    terminal: ['done', 'failed'],
  });
  return { definition, calls };
}

/** Every one of `ids` is in `state`, with a history that keeps the invariants of {@link historyProblems}. */
export async function expectAllFinished(bound: BoundProcess, ids: readonly string[], state = 'done'): Promise<void> {
  for (const id of ids) {
    const item = await bound.get(id);
    expect(item?.state, `final state of ${id}`).toBe(state);
    const history = await bound.history(id);
    expect(historyProblems(history, bound.definition.terminal), `history of ${id}`).toEqual([]);
  }
}
