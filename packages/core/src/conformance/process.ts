import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, test, type TestContext } from 'vitest';
import { hasCapability, type CapabilityName } from '../capabilities.js';
import type { KeyValueStore } from '../contracts/kv.js';
import type {
  HandlerContext,
  ProcessBackend,
  ProcessDefinition,
  ProcessEvent,
  ProcessItem,
  ProcessWorker,
  ProcessWorkerOptions,
  StateMachine,
  TransitionRecord,
} from '../contracts/process.js';
import type { JsonObject } from '../json.js';
import { MemoryKeyValueStore } from '../memory/kv.js';
import { createMemoryStorage, type MemoryStorage } from '../memory/storage.js';
import { defineProcess } from '../process/define.js';
import { createStateMachine } from '../process/state-machine.js';
import { DEFAULT_CURSOR_PREFIX, cursorKey } from '../process/worker.js';
import { describeWithSummary } from './harness.js';
import { INVALID_KEYS, expectReject, parallel, sleep, withClientSkew, CLIENT_SKEWS } from './helpers.js';
import type { ConformanceAdapter, ConformanceContext, ConformanceReport, DescribeContractOptions } from './types.js';

/*
 * Conformance cases for ProcessBackend, and for the state-machine engine running on it:
 * claims and compare-and-set transitions, leases on the database clock, ordered resumable
 * feeds, and whole processes with retries, dead-letters, killed workers and restarts.
 * `runProcessCrashScenario` / `runCrashTestWorker` add the multi-OS-process crash test
 * (SIGKILL) that adapter packages run with their own worker script.
 */

const CASE_TIMEOUT = 60_000;
/**
 * Leases in the engine cases: long enough for any handler here even on a slow, loaded server
 * (a lease that runs out mid-handler is a legitimate redelivery, which would spoil the counts),
 * short enough to wait out after a kill.
 */
const LEASE = 3000;
/** A lease the backend cases wait out. */
const SHORT_LEASE = 400;
const PAST_SHORT_LEASE = SHORT_LEASE + 350;
const LONG_LEASE = 60_000;
/** How long a case waits for a process to finish before failing (a liveness bound, not a timing assertion). */
const SETTLE_TIMEOUT = 40_000;

const TEST_WORKER_OPTIONS = {
  pollInterval: 100,
  recoveryInterval: 100,
  cursorInterval: 50,
} as const satisfies Partial<ProcessWorkerOptions>;

interface ProcessCase {
  name: string;
  /** Capabilities the backend needs for this case; without them it is skipped (and reported). */
  needs?: CapabilityName[];
  /** Runs alone: it patches globals, or starts workers that should not compete with other cases for the CPU. */
  exclusive?: boolean;
  run(session: ProcessSession): Promise<void>;
}

/**
 * One case's view of the adapter: opens backends (each like a separate process on the same
 * database) and cursor stores through the test's context, and closes everything afterwards.
 */
class ProcessSession {
  readonly #context: ConformanceContext;
  readonly #needs: readonly CapabilityName[];
  readonly #skip: (reason: string) => never;
  readonly #opened: { close(): Promise<void> }[] = [];
  readonly #workers: ProcessWorker[] = [];
  /** Cursor stores share this storage when the adapter has no kv() factory. */
  #memoryStorage: MemoryStorage | undefined;

  constructor(context: ConformanceContext, needs: readonly CapabilityName[], skip: (reason: string) => never) {
    this.#context = context;
    this.#needs = needs;
    this.#skip = skip;
  }

  skip(reason: string): never {
    return this.#skip(reason);
  }

  async backend(): Promise<ProcessBackend> {
    const factory = this.#context.process;
    if (typeof factory !== 'function') this.#skip('the adapter has no process() factory');
    const backend = await factory.call(this.#context);
    this.#opened.push(backend);
    const missing = this.#needs.filter((name) => !hasCapability(backend.capabilities, name));
    if (missing.length > 0) this.#skip(`needs ${missing.join(', ')}`);
    return backend;
  }

  /** A KeyValueStore for cursors: the adapter's own when it has one, else an in-memory one. */
  async cursors(): Promise<KeyValueStore> {
    const store = this.#context.kv
      ? await this.#context.kv()
      : new MemoryKeyValueStore({ storage: (this.#memoryStorage ??= createMemoryStorage()) });
    this.#opened.push(store);
    return store;
  }

  machine<TActive extends string, TTerminal extends string>(
    backend: ProcessBackend,
    definition: ProcessDefinition<JsonObject, TActive, TTerminal>,
  ): StateMachine<JsonObject, TActive, TTerminal> {
    return createStateMachine(backend, definition);
  }

  /** A worker that is stopped when the case ends, whatever happens. */
  worker(machine: StateMachine, options: ProcessWorkerOptions): ProcessWorker {
    const worker = machine.worker({ ...TEST_WORKER_OPTIONS, ...options });
    this.#workers.push(worker);
    return worker;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.#workers.map((worker) => worker.stop()));
    const results = await Promise.allSettled(this.#opened.map((instance) => instance.close()));
    const failure = results.find((result) => result.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;
  }
}

// ---------------------------------------------------------------------------------------
// Helpers shared by the cases and by adapters' own tests.
// ---------------------------------------------------------------------------------------

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
export async function listAllItems(machine: StateMachine): Promise<ProcessItem[]> {
  const items: ProcessItem[] = [];
  for (let after: string | undefined; ; ) {
    const page = await machine.list({ limit: 1000, ...(after !== undefined && { after }) });
    items.push(...page);
    if (page.length < 1000) return items;
    after = page.at(-1)!.id;
  }
}

/** True when every one of `ids` is listed, and in a terminal state. */
async function allFinished(machine: StateMachine, ids: readonly string[]): Promise<boolean> {
  const states = new Map((await listAllItems(machine)).map((item) => [item.id, item.state]));
  return ids.every((id) => machine.definition.terminal.includes(states.get(id) ?? ''));
}

interface HandlerCall {
  item: string;
  state: string;
  key: string;
  attempt: number;
  worker: string;
}

/** Records every handler call, for counting duplicates. */
class CallLog {
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

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** a -> b -> done, with `failed` as the dead-letter state. */
function abProcess(
  handlers: {
    a?: (item: ProcessItem, context: HandlerContext) => Promise<unknown> | unknown;
    b?: (item: ProcessItem, context: HandlerContext) => Promise<unknown> | unknown;
  },
  options: { concurrency?: number; maxAttempts?: number } = {},
) {
  const calls = new CallLog();
  const definition = defineProcess({
    name: 'conformance',
    initial: 'a',
    lease: LEASE,
    retry: { maxAttempts: options.maxAttempts ?? 3, backoff: { initial: 10, factor: 2, max: 100, jitter: 0 } },
    states: {
      a: {
        concurrency: options.concurrency ?? 4,
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

async function expectAllFinished(machine: StateMachine, ids: readonly string[], state = 'done'): Promise<void> {
  for (const id of ids) {
    const item = await machine.get(id);
    expect(item?.state, `final state of ${id}`).toBe(state);
    const history = await machine.history(id);
    expect(historyProblems(history, machine.definition.terminal), `history of ${id}`).toEqual([]);
  }
}

const ids = (count: number, prefix = 'item') => Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(3, '0')}`);

// ---------------------------------------------------------------------------------------
// The cases.
// ---------------------------------------------------------------------------------------

const CASES: ProcessCase[] = [];
const it = (name: string, optionsOrRun: Omit<ProcessCase, 'name' | 'run'> | ProcessCase['run'], run?: ProcessCase['run']) => {
  const options = typeof optionsOrRun === 'function' ? {} : optionsOrRun;
  CASES.push({ name, ...options, run: typeof optionsOrRun === 'function' ? optionsOrRun : run! });
};

const P = 'conformance';

// --- The backend ---

it('createItem starts an item at version 1 with a create entry; an existing id is left as is', async (s) => {
  const backend = await s.backend();
  const first = await backend.createItem({ process: P, id: 'x', state: 'a', data: { n: 1 } });
  expect(first.created).toBe(true);
  expect(first.item).toMatchObject({ id: 'x', state: 'a', data: { n: 1 }, version: 1, attempts: 0, lastError: null, leaseOwner: null, leaseUntil: null });
  expect(first.item.createdAt).toBeInstanceOf(Date);
  const again = await backend.createItem({ process: P, id: 'x', state: 'b', data: { n: 2 } });
  expect(again.created).toBe(false);
  expect(again.item).toMatchObject({ state: 'a', data: { n: 1 }, version: 1 });
  const history = await backend.history(P, 'x');
  expect(history).toHaveLength(1);
  expect(history[0]).toMatchObject({ itemId: 'x', from: null, to: 'a', version: 1, kind: 'create', key: null, error: null });
  expect(history[0]!.at).toBeInstanceOf(Date);
  expect(await backend.getItem(P, 'missing')).toBeNull();
  expect(await backend.history(P, 'missing')).toEqual([]);
  // Processes are separate namespaces.
  expect(await backend.getItem('other', 'x')).toBeNull();
  expect((await backend.createItem({ process: 'other', id: 'x', state: 'z', data: {} })).created).toBe(true);
});

it('hostile item ids and JSON data round-trip exactly', async (s) => {
  const backend = await s.backend();
  const hostile = ["it's", 'a%b_c', 'x\\y', '日本語', 'emoji 😀', ' spaced ', 'new\nline', 'a:b:c', '\u0000nul'];
  const data = { text: 'ünïcödé "quoted" \u0000', nested: { list: [1, 2.5, -3, true, null, 'x'] }, empty: {}, big: 2 ** 52 };
  for (const id of hostile) await backend.createItem({ process: P, id, state: 'a', data });
  for (const id of hostile) {
    const item = await backend.getItem(P, id);
    expect(item?.id).toBe(id);
    expect(item?.data).toEqual(data);
  }
});

it('invalid ids, names and data reject with typed errors and store nothing', async (s) => {
  const backend = await s.backend();
  for (const [label, id] of INVALID_KEYS) {
    await expectReject(() => backend.createItem({ process: P, id: id as string, state: 'a', data: {} }), 'E_INVALID_KEY', `createItem(${label})`);
    await expectReject(() => backend.getItem(P, id as string), 'E_INVALID_KEY', `getItem(${label})`);
  }
  for (const name of ['', '1starts-with-digit', 'has space', 'quo"te', 'x'.repeat(64), 42]) {
    await expectReject(() => backend.createItem({ process: name as string, id: 'x', state: 'a', data: {} }), 'E_INVALID_OPTION', `process ${String(name)}`);
    await expectReject(() => backend.createItem({ process: P, id: 'x', state: name as string, data: {} }), 'E_INVALID_OPTION', `state ${String(name)}`);
  }
  for (const data of [null, [], 'text', 7, { date: new Date() }, { n: Number.NaN }]) {
    await expectReject(() => backend.createItem({ process: P, id: 'x', state: 'a', data: data as unknown as JsonObject }), 'E_INVALID_VALUE', `data ${String(data)}`);
  }
  await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 0, owner: 'o', lease: 1000 }), 'E_INVALID_OPTION', 'version 0');
  await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: '', lease: 1000 }), 'E_INVALID_OPTION', 'empty owner');
  await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: 0 }), 'E_INVALID_OPTION', 'lease 0');
  await expectReject(() => backend.listItems({ process: P, limit: 0 }), 'E_INVALID_OPTION', 'limit 0');
  await expectReject(
    () => backend.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'a', kind: 'advance', key: 'k' }),
    'E_INVALID_VALUE',
    'a transition to the same state',
  );
  expect(await backend.getItem(P, 'x')).toBeNull();
  expect(await backend.listItems({ process: P, limit: 10 })).toEqual([]);
});

it('listItems pages in id order and filters by state', async (s) => {
  const backend = await s.backend();
  const all = ['b', 'a', 'c', 'é', 'A', 'aa'];
  for (const [index, id] of all.entries()) await backend.createItem({ process: P, id, state: index % 2 ? 'odd' : 'even', data: { index } });
  const sorted = ['A', 'a', 'aa', 'b', 'c', 'é'];
  expect((await backend.listItems({ process: P, limit: 100 })).map((item) => item.id)).toEqual(sorted);
  const page1 = await backend.listItems({ process: P, limit: 4 });
  const page2 = await backend.listItems({ process: P, limit: 4, after: page1.at(-1)!.id });
  expect([...page1, ...page2].map((item) => item.id)).toEqual(sorted);
  expect((await backend.listItems({ process: P, state: 'odd', limit: 100 })).map((item) => item.id)).toEqual(['a', 'aa', 'é']);
});

it('claim: exactly one of many parallel claimers wins, and attempts count claims', async (s) => {
  const backends = await Promise.all([1, 2, 3, 4].map(() => s.backend()));
  await backends[0]!.createItem({ process: P, id: 'x', state: 'a', data: {} });
  const results = await parallel(12, (i) =>
    backends[i % backends.length]!.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: `owner-${i}`, lease: LONG_LEASE }),
  );
  const winners = results.filter((item) => item !== null);
  expect(winners).toHaveLength(1);
  expect(winners[0]).toMatchObject({ id: 'x', attempts: 1, version: 1 });
  expect(winners[0]!.leaseOwner).toMatch(/^owner-/);
  expect(winners[0]!.leaseUntil).toBeInstanceOf(Date);
  // Wrong state or version: nothing to claim.
  expect(await backends[0]!.claim({ process: P, itemId: 'x', state: 'b', version: 1, owner: 'other', lease: 1000 })).toBeNull();
  expect(await backends[0]!.claim({ process: P, itemId: 'x', state: 'a', version: 2, owner: 'other', lease: 1000 })).toBeNull();
  expect(await backends[0]!.claim({ process: P, itemId: 'missing', state: 'a', version: 1, owner: 'other', lease: 1000 })).toBeNull();
});

it('transition: exactly one of many parallel compare-and-sets applies, with its log entry', async (s) => {
  const backends = await Promise.all([1, 2, 3].map(() => s.backend()));
  await backends[0]!.createItem({ process: P, id: 'x', state: 'a', data: { n: 0 } });
  await backends[0]!.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
  const results = await parallel(9, (i) =>
    backends[i % backends.length]!.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'b', data: { n: i }, kind: 'advance', key: `key-${i}` }),
  );
  const applied = results.filter((item) => item !== null);
  expect(applied).toHaveLength(1);
  const winner = applied[0]!;
  expect(winner).toMatchObject({ state: 'b', version: 2, attempts: 0, leaseOwner: null, leaseUntil: null, lastError: null });
  const history = await backends[0]!.history(P, 'x');
  expect(history).toHaveLength(2);
  expect(history[1]).toMatchObject({ from: 'a', to: 'b', version: 2, kind: 'advance', key: `key-${winner.data.n as number}` });
  // The stale version, or the wrong state, never applies again.
  expect(await backends[1]!.transition({ process: P, itemId: 'x', from: 'a', version: 1, to: 'c', kind: 'advance', key: 'late' })).toBeNull();
  expect(await backends[1]!.transition({ process: P, itemId: 'x', from: 'c', version: 2, to: 'd', kind: 'advance', key: 'wrong' })).toBeNull();
  // Without data the data is kept; a dead-letter keeps its error.
  const dead = await backends[2]!.transition({ process: P, itemId: 'x', from: 'b', version: 2, to: 'failed', kind: 'dead-letter', key: 'k2', error: 'boom' });
  expect(dead).toMatchObject({ state: 'failed', version: 3, data: winner.data, lastError: 'boom' });
  expect((await backends[0]!.history(P, 'x'))[2]).toMatchObject({ kind: 'dead-letter', error: 'boom', key: 'k2' });
});

it('leases run out on the database clock; extend and release need the owner', async (s) => {
  const backend = await s.backend();
  const other = await s.backend();
  await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
  const claim = { process: P, itemId: 'x', state: 'a', version: 1, lease: SHORT_LEASE };
  expect(await backend.claim({ ...claim, owner: 'first' })).not.toBeNull();
  expect(await other.claim({ ...claim, owner: 'second' })).toBeNull();
  expect(await other.findClaimable({ process: P, state: 'a', includeUnclaimed: true, limit: 10 })).toEqual([]);
  await sleep(PAST_SHORT_LEASE);
  expect(await other.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'x', version: 1 }]);
  const second = await other.claim({ ...claim, owner: 'second' });
  expect(second).toMatchObject({ attempts: 2, leaseOwner: 'second' });
  const lease = { process: P, itemId: 'x', version: 1, lease: LONG_LEASE };
  expect(await backend.extendLease({ ...lease, owner: 'first' })).toBe(false);
  expect(await backend.release({ ...lease, owner: 'first', delay: 0, refundAttempt: false })).toBe(false);
  expect(await other.extendLease({ ...lease, owner: 'second' })).toBe(true);
  expect(await other.extendLease({ ...lease, version: 2, owner: 'second' })).toBe(false);
  expect((await other.getItem(P, 'x'))!.leaseOwner).toBe('second');
});

it('leases ignore a client clock that is ten minutes off', { exclusive: true, needs: ['serverClock'] }, async (s) => {
  const backend = await s.backend();
  await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
  expect(await backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'first', lease: LONG_LEASE })).not.toBeNull();
  for (const offset of CLIENT_SKEWS) {
    await withClientSkew(async (skew) => {
      skew.set(offset);
      expect(await backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'second', lease: 1000 })).toBeNull();
      expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toEqual([]);
    });
  }
  await backend.createItem({ process: P, id: 'y', state: 'a', data: {} });
  await withClientSkew(async (skew) => {
    skew.set(CLIENT_SKEWS[1]);
    expect(await backend.claim({ process: P, itemId: 'y', state: 'a', version: 1, owner: 'o', lease: SHORT_LEASE })).not.toBeNull();
    skew.set(CLIENT_SKEWS[0]);
    expect(await backend.claim({ process: P, itemId: 'y', state: 'a', version: 1, owner: 'p', lease: SHORT_LEASE })).toBeNull();
  });
});

it('release: the item comes back after the delay; a refunded attempt is not counted', async (s) => {
  const backend = await s.backend();
  await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
  const claim = { process: P, itemId: 'x', state: 'a', version: 1, lease: LONG_LEASE };
  await backend.claim({ ...claim, owner: 'o' });
  expect(await backend.release({ process: P, itemId: 'x', version: 1, owner: 'o', delay: SHORT_LEASE, refundAttempt: false, error: 'try later' })).toBe(true);
  expect(await backend.getItem(P, 'x')).toMatchObject({ attempts: 1, lastError: 'try later' });
  expect(await backend.claim({ ...claim, owner: 'p' })).toBeNull();
  await sleep(PAST_SHORT_LEASE);
  expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toHaveLength(1);
  expect(await backend.claim({ ...claim, owner: 'p' })).toMatchObject({ attempts: 2 });
  expect(await backend.release({ process: P, itemId: 'x', version: 1, owner: 'p', delay: 0, refundAttempt: true })).toBe(true);
  const handedBack = await backend.getItem(P, 'x');
  expect(handedBack).toMatchObject({ attempts: 1, lastError: 'try later' });
  // Handed back with no delay: claimable at once, and found by a recovery scan.
  expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'x' }]);
  expect(await backend.claim({ ...claim, owner: 'q' })).toMatchObject({ attempts: 2, leaseOwner: 'q' });
});

it('findClaimable: unclaimed items only when asked, expired claims always, never live ones', async (s) => {
  const backend = await s.backend();
  for (const id of ['fresh', 'live', 'expired']) await backend.createItem({ process: P, id, state: 'a', data: {} });
  await backend.createItem({ process: P, id: 'elsewhere', state: 'b', data: {} });
  await backend.claim({ process: P, itemId: 'live', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
  await backend.claim({ process: P, itemId: 'expired', state: 'a', version: 1, owner: 'o', lease: SHORT_LEASE });
  await sleep(PAST_SHORT_LEASE);
  const scan = async (includeUnclaimed: boolean) =>
    (await backend.findClaimable({ process: P, state: 'a', includeUnclaimed, limit: 10 })).map((change) => change.itemId).sort();
  expect(await scan(false)).toEqual(['expired']);
  expect(await scan(true)).toEqual(['expired', 'fresh']);
  expect(await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: true, limit: 1 })).toHaveLength(1);
  // Unclaimed items that have waited long enough (the engine's safety net for a late feed).
  const waitedFor = async (unclaimedFor: number) =>
    (await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, unclaimedFor, limit: 10 })).map((change) => change.itemId).sort();
  expect(await waitedFor(LONG_LEASE)).toEqual(['expired']);
  expect(await waitedFor(SHORT_LEASE)).toEqual(['expired', 'fresh']);
});

it('feed: items entering the state arrive in order, once, and a durable feed resumes after any position', async (s) => {
  const backend = await s.backend();
  const other = await s.backend();
  await backend.createItem({ process: P, id: 'before', state: 'a', data: {} });
  const feed = await backend.openFeed(P, 'a', null);
  if (!feed.durable) s.skip('the feed is not durable (a polling feed has no positions to resume)');
  expect(feed.resumed).toBe(false);
  const created = ids(5, 'feed');
  for (const id of created) await other.createItem({ process: P, id, state: 'a', data: {} });
  await other.createItem({ process: P, id: 'not-a', state: 'b', data: {} });
  await other.claim({ process: P, itemId: 'feed-000', state: 'a', version: 1, owner: 'o', lease: LONG_LEASE });
  await other.transition({ process: P, itemId: 'feed-000', from: 'a', version: 1, to: 'b', kind: 'advance', key: 'k' });
  await other.transition({ process: P, itemId: 'feed-000', from: 'b', version: 2, to: 'a', kind: 'advance', key: 'k2' });
  const read: { itemId: string; version: number; position: string }[] = [];
  await waitUntil(async () => {
    read.push(...(await feed.read({ limit: 2, wait: 200 })));
    return read.length >= 6;
  }, 'the feed delivered six changes');
  expect(read.map((change) => `${change.itemId}@${change.version}`)).toEqual([...created.map((id) => `${id}@1`), 'feed-000@3']);
  expect(await feed.read({ limit: 10, wait: 50 })).toEqual([]);
  await feed.close();

  const resumed = await other.openFeed(P, 'a', read[1]!.position);
  expect(resumed.resumed).toBe(true);
  const again: string[] = [];
  await waitUntil(async () => {
    again.push(...(await resumed.read({ limit: 10, wait: 200 })).map((change) => `${change.itemId}@${change.version}`));
    return again.length >= 4;
  }, 'the resumed feed delivered four changes');
  expect(again).toEqual(read.slice(2).map((change) => `${change.itemId}@${change.version}`));
  await resumed.close();

  const atEnd = await other.openFeed(P, 'a', read.at(-1)!.position);
  expect(await atEnd.read({ limit: 10, wait: 50 })).toEqual([]);
  await backend.createItem({ process: P, id: 'later', state: 'a', data: {} });
  const later: string[] = [];
  await waitUntil(async () => {
    later.push(...(await atEnd.read({ limit: 10, wait: 200 })).map((change) => change.itemId));
    return later.length >= 1;
  }, 'the feed delivered a later change');
  expect(later).toEqual(['later']);
  await atEnd.close();
});

it('feed: a read waiting for changes returns the change made meanwhile', async (s) => {
  const backend = await s.backend();
  const writer = await s.backend();
  const feed = await backend.openFeed(P, 'a', null);
  // A feed with wake-ups answers this read as soon as the item is created; a polling one
  // answers after `wait` with nothing, and a later read has it.
  const waiting = feed.read({ limit: 10, wait: 5_000 });
  await sleep(50);
  await writer.createItem({ process: P, id: 'woken', state: 'a', data: {} });
  const all = await waiting;
  await waitUntil(async () => {
    if (all.length === 0) all.push(...(await feed.read({ limit: 10, wait: 200 })));
    return all.length > 0;
  }, 'the feed delivered the change');
  expect(all.map((change) => change.itemId)).toEqual(['woken']);
  expect(await feed.read({ limit: 10, wait: 50 })).toEqual([]);
  await feed.close();
});

it('close is idempotent and every call afterwards rejects with E_CLOSED', async (s) => {
  const backend = await s.backend();
  await backend.createItem({ process: P, id: 'x', state: 'a', data: {} });
  const feed = await backend.openFeed(P, 'a', null);
  await backend.close();
  await backend.close();
  await expectReject(() => backend.getItem(P, 'x'), 'E_CLOSED', 'getItem');
  await expectReject(() => backend.createItem({ process: P, id: 'y', state: 'a', data: {} }), 'E_CLOSED', 'createItem');
  await expectReject(() => backend.claim({ process: P, itemId: 'x', state: 'a', version: 1, owner: 'o', lease: 1000 }), 'E_CLOSED', 'claim');
  await expectReject(() => backend.openFeed(P, 'a', null), 'E_CLOSED', 'openFeed');
  await expectReject(() => feed.read({ limit: 1, wait: 0 }), 'E_CLOSED', 'feed.read');
  const other = await s.backend();
  expect((await other.getItem(P, 'x'))?.id).toBe('x');
});

// --- The engine on the backend ---

it('a process runs every item through its states to a terminal state, once', { exclusive: true }, async (s) => {
  const { definition, calls } = abProcess({
    a: async (item) => ({ to: 'b', data: { ...item.data, visited: ['a'] } }),
  });
  const machine = s.machine(await s.backend(), definition);
  const items = ids(20);
  for (const id of items.slice(0, 10)) await machine.start(id, { id });
  const worker = s.worker(machine, { name: 'solo', cursors: await s.cursors() });
  await worker.start();
  for (const id of items.slice(10)) await machine.start(id, { id });
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
  await expectAllFinished(machine, items);
  expect((await machine.get('item-000'))!.data).toEqual({ id: 'item-000', visited: ['a'] });
  expect(calls.duplicates()).toEqual([]);
  for (const id of items) {
    const [a, b] = [calls.of(id, 'a')[0]!, calls.of(id, 'b')[0]!];
    const history = await machine.history(id);
    expect(history.map((entry) => entry.key)).toEqual([null, a.key, b.key]);
    expect(a.key).not.toBe(b.key);
  }
  await worker.stop();
});

it('failures are retried with backoff under one idempotency key, then dead-lettered', { exclusive: true }, async (s) => {
  const { definition, calls } = abProcess(
    {
      a: async (item, context) => {
        if (item.id === 'poison') throw new Error(`poison attempt ${context.attempt}`);
        if (item.id === 'flaky' && context.attempt < 3) throw new Error('flaky');
        return 'b';
      },
    },
    { maxAttempts: 3 },
  );
  const machine = s.machine(await s.backend(), definition);
  const events: ProcessEvent[] = [];
  const worker = s.worker(machine, { name: 'retrier', cursors: await s.cursors(), onEvent: (event) => events.push(event) });
  await worker.start();
  for (const id of ['poison', 'flaky', 'fine']) await machine.start(id, {});
  await waitUntil(() => allFinished(machine, ['poison', 'flaky', 'fine']), 'every item finished');
  const poison = (await machine.get('poison'))!;
  expect(poison.state).toBe('failed');
  expect(poison.lastError).toContain('poison attempt 3');
  const poisonCalls = calls.of('poison', 'a');
  expect(poisonCalls.map((call) => call.attempt)).toEqual([1, 2, 3]);
  expect(new Set(poisonCalls.map((call) => call.key)).size).toBe(1);
  const history = await machine.history('poison');
  expect(history.at(-1)).toMatchObject({ from: 'a', to: 'failed', kind: 'dead-letter', key: poisonCalls[0]!.key });
  expect(history.at(-1)!.error).toContain('poison attempt 3');
  expect(historyProblems(history, definition.terminal)).toEqual([]);
  expect(calls.of('flaky', 'a').map((call) => call.attempt)).toEqual([1, 2, 3]);
  await expectAllFinished(machine, ['flaky', 'fine']);
  expect(events.filter((event) => event.type === 'retry' && event.itemId === 'poison')).toHaveLength(2);
  expect(events.filter((event) => event.type === 'dead-lettered')).toMatchObject([{ itemId: 'poison', attempt: 3 }]);
  await worker.stop();
});

it('a handler returning an unknown state fails the attempt; { wait } runs it again without counting', { exclusive: true }, async (s) => {
  let waits = 0;
  const { definition, calls } = abProcess(
    {
      a: async (item) => {
        if (item.id === 'lost') return 'nowhere';
        if (item.id === 'patient' && waits < 2) {
          waits++;
          return { wait: 30 };
        }
        return 'b';
      },
    },
    { maxAttempts: 2 },
  );
  const machine = s.machine(await s.backend(), definition);
  const worker = s.worker(machine, { name: 'checker', cursors: await s.cursors() });
  await worker.start();
  await machine.start('lost', {});
  await machine.start('patient', {});
  await waitUntil(() => allFinished(machine, ['lost', 'patient']), 'both finished');
  expect(await machine.get('lost')).toMatchObject({ state: 'failed' });
  expect((await machine.get('lost'))!.lastError).toContain('nowhere');
  expect(calls.of('lost', 'a')).toHaveLength(2);
  expect(calls.of('patient', 'a').map((call) => call.attempt)).toEqual([1, 1, 1]);
  await expectAllFinished(machine, ['patient']);
  await worker.stop();
});

it('several workers on the same states never advance an item twice', { exclusive: true }, async (s) => {
  const { definition, calls } = abProcess({
    a: async () => {
      await sleep(Math.floor(Math.random() * 10));
      return 'b';
    },
    b: async () => {
      await sleep(Math.floor(Math.random() * 10));
      return 'done';
    },
  });
  const backend = await s.backend();
  const machine = s.machine(backend, definition);
  const items = ids(40);
  const workers = await Promise.all(
    ['w0', 'w1', 'w2'].map(async (name) => s.worker(s.machine(await s.backend(), definition), { name, cursors: await s.cursors() })),
  );
  await Promise.all(workers.map((worker) => worker.start()));
  await parallel(items.length, (i) => machine.start(items[i]!, {}));
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
  await expectAllFinished(machine, items);
  // No crash: where updates are atomic a claim is exclusive, so no handler ran twice either.
  // Without atomic updates (FerretDB 1.x) a claim taken over as its lease ends may be delivered
  // again (at least once); the histories above still show every item advanced exactly once.
  if (hasCapability(backend.capabilities, 'atomicUpdates')) expect(calls.duplicates()).toEqual([]);
  await Promise.all(workers.map((worker) => worker.stop()));
});

it('a killed worker loses nothing: its claimed items are retried once its leases run out', { exclusive: true }, async (s) => {
  const stuck = deferred();
  let killed = false;
  const { definition, calls } = abProcess(
    {
      a: async (_item, context) => {
        if (context.worker === 'victim' && !killed) await stuck.promise;
        return 'b';
      },
    },
    { concurrency: 3 },
  );
  const machine = s.machine(await s.backend(), definition);
  const items = ids(12);
  for (const id of items) await machine.start(id, {});
  // The victim runs only "a"; it claims three items and hangs in all three handlers.
  const victimBackend = await s.backend();
  const victimCursors = await s.cursors();
  const victim = s.worker(s.machine(victimBackend, definition), { name: 'victim', states: ['a'], cursors: victimCursors, shutdownTimeout: 0 });
  await victim.start();
  await waitUntil(() => calls.calls.filter((call) => call.worker === 'victim').length === 3, 'the victim is in three handlers');
  const inFlight = calls.calls.filter((call) => call.worker === 'victim').map((call) => call.item);

  // "Kill" it: its connections go away, so nothing it does from now on reaches the database.
  killed = true;
  await victimBackend.close();
  await victimCursors.close();
  void victim.stop();

  // The same worker restarted, and a helper; they finish everything.
  const restarted = s.worker(s.machine(await s.backend(), definition), { name: 'victim', cursors: await s.cursors() });
  const helper = s.worker(s.machine(await s.backend(), definition), { name: 'helper', cursors: await s.cursors() });
  await Promise.all([restarted.start(), helper.start()]);
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 100 })).length === items.length, 'every item is done');
  stuck.resolve(); // the killed worker's handlers return into a closed backend
  await sleep(50);
  await expectAllFinished(machine, items);
  const duplicates = calls.duplicates();
  // Exactly the items in flight at the kill ran twice (at-least-once), each in state "a" only.
  expect(duplicates.map((call) => call.item).sort()).toEqual([...inFlight].sort());
  expect(duplicates.every((call) => call.state === 'a' && call.attempt === 2)).toBe(true);
  for (const id of inFlight) {
    const keys = calls.of(id, 'a').map((call) => call.key);
    expect(new Set(keys).size, `one idempotency key for both deliveries of ${id}`).toBe(1);
  }
  await Promise.all([restarted.stop(), helper.stop()]);
});

it('a restarted worker resumes from its cursor: completed items are not handed to it again', { exclusive: true }, async (s) => {
  const { definition, calls } = abProcess({});
  const machine = s.machine(await s.backend(), definition);
  const cursors = await s.cursors();
  const opened: ProcessEvent[] = [];
  const onEvent = (event: ProcessEvent) => event.type === 'feed-opened' && opened.push(event);
  const first = s.worker(machine, { name: 'resumer', cursors, onEvent });
  await first.start();
  const before = ids(6, 'before');
  for (const id of before) await machine.start(id, {});
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 100 })).length === before.length, 'the first batch is done');
  await first.stop();
  const durable = opened.every((event) => event.type === 'feed-opened' && event.durable);
  if (durable) {
    for (const state of ['a', 'b']) {
      const stored = await cursors.get(cursorKey(DEFAULT_CURSOR_PREFIX, P, state, 'resumer'));
      expect(stored, `cursor of state ${state}`).not.toBeNull();
    }
  }

  const after = ids(6, 'after');
  for (const id of after) await machine.start(id, {});
  opened.length = 0;
  const second = s.worker(s.machine(await s.backend(), definition), { name: 'resumer', cursors, onEvent });
  await second.start();
  expect(opened).toHaveLength(2);
  for (const event of opened) {
    expect(event).toMatchObject({ type: 'feed-opened', resumed: true });
    if (durable) expect((event as { position: string | null }).position).not.toBeNull();
  }
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 100 })).length === before.length + after.length, 'the second batch is done');
  await expectAllFinished(machine, [...before, ...after]);
  // Nothing finished before the restart reached a handler again.
  expect(calls.calls.filter((call) => before.includes(call.item))).toHaveLength(before.length * 2);
  expect(calls.duplicates()).toEqual([]);
  await second.stop();
});

it('graceful shutdown lets handlers finish, or hands their items back at once when out of time', { exclusive: true }, async (s) => {
  const release = deferred();
  const { definition, calls } = abProcess({
    a: async (item, context) => {
      if (item.id === 'slow') {
        // Ends only when the worker aborts it.
        await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }));
        if (context.worker === 'leaving') return 'b';
      }
      if (item.id === 'quick') await release.promise;
      return 'b';
    },
    b: async (_item, context) => (context.worker === 'leaving' ? 'done' : 'done'),
  });
  const machine = s.machine(await s.backend(), definition);
  const events: ProcessEvent[] = [];
  const leaving = s.worker(machine, { name: 'leaving', states: ['a'], cursors: await s.cursors(), shutdownTimeout: 300, onEvent: (event) => events.push(event) });
  await leaving.start();
  await machine.start('slow', {});
  await machine.start('quick', {});
  await waitUntil(() => calls.calls.length === 2, 'both handlers run');
  const stopping = leaving.stop();
  release.resolve(); // "quick" finishes within the grace period
  await stopping;
  expect(await machine.get('quick')).toMatchObject({ state: 'b' });
  expect(events.filter((event) => event.type === 'handed-back')).toMatchObject([{ itemId: 'slow', version: 1 }]);
  expect(events.at(-1)).toMatchObject({ type: 'stopped', handedBack: 1 });
  // Handed back: claimable now (no lease to wait out), and the attempt was refunded.
  const slow = (await machine.get('slow'))!;
  expect(slow).toMatchObject({ state: 'a', attempts: 0 });
  expect(await machine.backend.findClaimable({ process: P, state: 'a', includeUnclaimed: false, limit: 10 })).toMatchObject([{ itemId: 'slow' }]);
  const next = s.worker(s.machine(await s.backend(), definition), { name: 'next', cursors: await s.cursors(), shutdownTimeout: 0 });
  await next.start();
  await waitUntil(async () => (await machine.list({ state: 'done', limit: 10 })).length === 1, '"quick" is done');
  // "slow" is in flight again on the next worker, as its first counted attempt.
  await waitUntil(() => calls.of('slow').length === 2, '"slow" is delivered again');
  expect(calls.of('slow').at(-1)).toMatchObject({ worker: 'next', attempt: 1 });
  await next.stop();
});

it('worker options are validated', async (s) => {
  const { definition } = abProcess({});
  const machine = s.machine(await s.backend(), definition);
  const cursors = await s.cursors();
  const bad: [string, Partial<ProcessWorkerOptions>][] = [
    ['no name', { name: '' }],
    ['a name with a space', { name: 'a b' }],
    ['no cursors', { cursors: undefined as never }],
    ['an unknown state', { states: ['nope'] }],
    ['a terminal state', { states: ['done'] }],
    ['concurrency 0', { concurrency: { a: 0 } }],
    ['pollInterval 0', { pollInterval: 0 }],
  ];
  for (const [label, options] of bad) {
    expect(() => machine.worker({ name: 'w', cursors, ...options }), label).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  }
  await expectReject(() => machine.start('x', {}, { state: 'done' as never }), 'E_INVALID_OPTION', 'start in a terminal state');
});

// ---------------------------------------------------------------------------------------
// Registration.
// ---------------------------------------------------------------------------------------

/** The names of the process cases, for adapter docs. */
export function listProcessCases(): string[] {
  return CASES.map((c) => c.name);
}

/** Registers the process cases inside the current `describe` (for `describeConformance`). */
export function registerProcessCases(adapter: ConformanceAdapter, report: ConformanceReport): void {
  describe('ProcessBackend', () => {
    const ordered = [...CASES.filter((c) => !c.exclusive), ...CASES.filter((c) => c.exclusive)];
    for (const processCase of ordered) {
      const register = processCase.exclusive ? test : test.concurrent;
      register(processCase.name, (testContext: TestContext) => runProcessCase(adapter, processCase, report, testContext), CASE_TIMEOUT);
    }
  });
}

/**
 * Whether `describeConformance` should include the process cases: it calls `createContext()`
 * once, without opening anything, and looks for a `process()` factory. An adapter whose
 * `createContext` is async is not inspected; call {@link describeProcess} for it directly.
 */
export function adapterHasProcessFactory(adapter: ConformanceAdapter): boolean {
  const context = adapter.createContext();
  if (context instanceof Promise) {
    context.catch(() => undefined);
    return false;
  }
  return typeof context?.process === 'function';
}

/**
 * The ProcessBackend cases and the state-machine engine on top of it. The adapter's context
 * needs a `process()` factory (each call: a new backend on the same namespace, like another
 * process); cursors go to its `kv()` when it has one.
 */
export function describeProcess(adapter: ConformanceAdapter, options?: DescribeContractOptions): ConformanceReport {
  return describeWithSummary(adapter, `ProcessBackend conformance: ${adapter.name}`, options, (report) =>
    registerProcessCases(adapter, report),
  );
}

async function runProcessCase(
  adapter: ConformanceAdapter,
  processCase: ProcessCase,
  report: ConformanceReport,
  testContext: TestContext,
): Promise<void> {
  const skip = (reason: string): never => {
    report.skipped.push({ adapter: adapter.name, contract: 'ProcessBackend', case: processCase.name, reason });
    return testContext.skip(`${reason} (${adapter.name})`);
  };
  const context = await adapter.createContext();
  const session = new ProcessSession(context, processCase.needs ?? [], skip);
  report.started++;
  // The case's own failure (or skip) wins over a failure to close what it opened.
  const outcome = await processCase.run(session).then(
    () => ({ failed: false as const }),
    (error: unknown) => ({ failed: true as const, error }),
  );
  const closing = await session.closeAll().then(
    () => null,
    (error: unknown) => ({ error }),
  );
  await context.cleanup?.();
  if (outcome.failed) throw outcome.error;
  if (closing) throw closing.error;
}

// ---------------------------------------------------------------------------------------
// The multi-OS-process crash test.
// ---------------------------------------------------------------------------------------

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
   * when a loaded machine reads the worker's "begin" line late (at 50 ms a kill once landed after
   * the handler had finished).
   */
  workMs?: number;
  /** Lease per claim (default 5000): a loaded CI machine must not let leases run out mid-handler. */
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
  const worker = createStateMachine(options.backend, definition).worker({
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
  const machine = createStateMachine(options.backend, crashTestDefinition({}));
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

  const itemIds = ids(itemCount, 'crash');
  // One batch waits before the workers start; each kill gets a fresh batch started just before
  // it, so there is always work in flight to interrupt, however fast (or slow to start) the
  // workers were.
  const batchSize = Math.ceil(itemCount / (kills + 1));
  const batches = Array.from({ length: kills + 1 }, (_, i) => itemIds.slice(i * batchSize, (i + 1) * batchSize));
  const startBatch = async (batch: string[]) => {
    for (const id of batch) await machine.start(id, { id });
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
      waitUntil(() => allFinished(machine, itemIds), 'every item finished', timeout),
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
  for (const item of await listAllItems(machine)) {
    finalStates[item.state] = (finalStates[item.state] ?? 0) + 1;
    const found = historyProblems(await machine.history(item.id), machine.definition.terminal);
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
