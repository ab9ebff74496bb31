import { randomUUID } from 'node:crypto';
import { sleep } from '../clock.js';
import { StowageError, isStowageError } from '../errors.js';
import { assertValidDuration, describeValue } from '../keys.js';
import type { JsonObject } from '../json.js';
import type {
  ProcessBackend,
  ProcessChange,
  ProcessDefinition,
  ProcessFeed,
  ProcessItem,
  ProcessWorker,
  ProcessWorkerOptions,
  StateDefinition,
} from '../contracts/process.js';
import { assertConcurrency } from './define.js';
import { Task } from './task.js';
import type { WorkerSettings } from './worker-settings.js';
import { assertWorkerName } from './validation.js';

export const DEFAULT_CURSOR_PREFIX = 'stowage:process:';
const DEFAULT_POLL_INTERVAL = 1000;
const DEFAULT_CURSOR_INTERVAL = 1000;
const DEFAULT_SHUTDOWN_TIMEOUT = 10_000;
const MAX_RECOVERY_INTERVAL = 5000;
const DEFAULT_UNCLAIMED_AFTER = 30_000;

/** The KeyValueStore key under which a worker keeps its resume token for one state. */
export function cursorKey(prefix: string, processName: string, state: string, worker: string): string {
  return `${prefix}${processName}:cursor:${state}:${worker}`;
}

/** The owner (worker incarnation) a stored cursor value names, if it names one. */
function savedBy(value: string | undefined): unknown {
  try {
    return value === undefined ? undefined : (JSON.parse(value) as { owner?: unknown }).owner;
  } catch {
    return undefined;
  }
}

/** A change waiting to be claimed. Feed changes carry their entry in the cursor's window. */
interface Candidate {
  change: ProcessChange;
  source: 'feed' | 'backlog' | 'recovery';
  entry?: FeedEntry;
}

interface FeedEntry {
  position: string;
  settled: boolean;
}

/** A one-shot wake-up that can be awaited repeatedly. */
class Wakeup {
  #resolve: (() => void) | undefined;
  #promise: Promise<void> | undefined;
  wait(signal: AbortSignal): Promise<void> {
    this.#promise ??= new Promise((resolve) => (this.#resolve = resolve));
    return new Promise((resolve) => {
      const onAbort = () => resolve();
      signal.addEventListener('abort', onAbort, { once: true });
      void this.#promise!.then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }
  notify(): void {
    this.#resolve?.();
    this.#promise = undefined;
    this.#resolve = undefined;
  }
}

/**
 * The engine's worker (what `bindProcess(…).worker(options)` returns): one
 * {@link StateRunner} per state it runs, each with its own feed, cursor and concurrency, and
 * one {@link Task} per claimed item. See `ProcessWorker` for the contract.
 */
export class EngineWorker implements ProcessWorker {
  readonly name: string;
  readonly stopped: Promise<void>;
  #settings: WorkerSettings;
  #runners: StateRunner[];
  #status: 'idle' | 'starting' | 'running' | 'stopping' | 'stopped' = 'idle';
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  #resolveStopped!: () => void;
  #stopController = new AbortController();
  #outOfTimeController = new AbortController();
  #cursorTimer: NodeJS.Timeout | undefined;
  #cursorInterval: number;

  constructor(backend: ProcessBackend, definition: ProcessDefinition, options: ProcessWorkerOptions) {
    if (options === null || typeof options !== 'object') {
      throw new StowageError('E_INVALID_OPTION', 'worker options must be an object');
    }
    assertWorkerName(options.name);
    const cursors = options.cursors;
    if (cursors === null || typeof cursors !== 'object' || typeof cursors.compareAndSet !== 'function') {
      throw new StowageError('E_INVALID_OPTION', 'cursors must be a KeyValueStore (it keeps the resume tokens)');
    }
    const states = options.states ?? definition.activeStates;
    if (!Array.isArray(states) || states.length === 0) {
      throw new StowageError('E_INVALID_OPTION', 'states must list at least one state');
    }
    for (const state of states) {
      if (!(definition.activeStates as readonly string[]).includes(state)) {
        throw new StowageError('E_INVALID_OPTION', `process "${definition.name}" has no state with a handler named ${describeValue(state)}`);
      }
    }
    for (const [state, value] of Object.entries(options.concurrency ?? {})) {
      if (!states.includes(state)) throw new StowageError('E_INVALID_OPTION', `concurrency given for "${state}", which this worker does not run`);
      assertConcurrency(value, `concurrency.${state}`);
    }
    const pollInterval = options.pollInterval ?? DEFAULT_POLL_INTERVAL;
    assertValidDuration(pollInterval, 'pollInterval');
    const stateDefinitions = definition.states as Record<string, StateDefinition<JsonObject, string>>;
    const leases = states.map((state) => stateDefinitions[state]!.lease ?? definition.lease);
    const recoveryInterval =
      options.recoveryInterval ?? Math.min(MAX_RECOVERY_INTERVAL, Math.max(10, Math.floor(Math.min(...leases) / 4)));
    assertValidDuration(recoveryInterval, 'recoveryInterval');
    const unclaimedAfter = options.unclaimedAfter ?? DEFAULT_UNCLAIMED_AFTER;
    assertValidDuration(unclaimedAfter, 'unclaimedAfter');
    this.#cursorInterval = options.cursorInterval ?? DEFAULT_CURSOR_INTERVAL;
    assertValidDuration(this.#cursorInterval, 'cursorInterval');
    const shutdownTimeout = options.shutdownTimeout ?? DEFAULT_SHUTDOWN_TIMEOUT;
    if (!Number.isSafeInteger(shutdownTimeout) || shutdownTimeout < 0) {
      throw new StowageError('E_INVALID_OPTION', 'shutdownTimeout must be a non-negative integer number of ms');
    }
    const cursorPrefix = options.cursorPrefix ?? DEFAULT_CURSOR_PREFIX;
    if (typeof cursorPrefix !== 'string') throw new StowageError('E_INVALID_OPTION', 'cursorPrefix must be a string');
    const onEvent = options.onEvent;

    this.name = options.name;
    this.stopped = new Promise((resolve) => (this.#resolveStopped = resolve));
    this.#settings = {
      name: options.name,
      owner: `${options.name}.${randomUUID()}`,
      backend,
      definition,
      cursors,
      cursorPrefix,
      pollInterval,
      recoveryInterval,
      unclaimedAfter,
      shutdownTimeout,
      emit: (event) => {
        try {
          onEvent?.(event);
        } catch {
          // A listener's failure must not stop the worker.
        }
      },
      stopping: this.#stopController.signal,
      outOfTime: this.#outOfTimeController.signal,
    };
    this.#runners = states.map((state, index) => {
      const concurrency = options.concurrency?.[state] ?? stateDefinitions[state]!.concurrency ?? 1;
      return new StateRunner(this.#settings, state, concurrency, leases[index]!);
    });
  }

  start(): Promise<void> {
    if (this.#status !== 'idle') return this.#starting ?? Promise.resolve();
    this.#status = 'starting';
    this.#starting = (async () => {
      try {
        await Promise.all(this.#runners.map((runner) => runner.open()));
        await this.#assertTransactions();
      } catch (error) {
        await Promise.all(this.#runners.map((runner) => runner.closeFeed()));
        this.#status = 'stopped';
        this.#resolveStopped();
        throw error;
      }
      if (this.#status !== 'starting') return;
      this.#status = 'running';
      for (const runner of this.#runners) runner.startLoop();
      this.#cursorTimer = setInterval(() => {
        for (const runner of this.#runners) void runner.saveCursor();
      }, this.#cursorInterval);
      this.#cursorTimer.unref();
    })();
    return this.#starting;
  }

  /** Transactional states need a backend that begins transactions: an empty one is tried. */
  async #assertTransactions(): Promise<void> {
    const { backend, definition } = this.#settings;
    const states = definition.states as Record<string, StateDefinition<JsonObject, string>>;
    const transactional = this.#runners.map((runner) => runner.state).filter((state) => states[state]!.transactional === true);
    if (transactional.length === 0) return;
    const refused = () =>
      new StowageError('E_INVALID_OPTION', `state ${transactional.map((state) => `"${state}"`).join(', ')} is transactional, but this process backend cannot begin transactions on its database`);
    if (typeof backend.transaction !== 'function') throw refused();
    await backend.transaction(async () => undefined).catch((error: unknown) => {
      throw isStowageError(error, 'E_INVALID_OPTION') ? refused() : error;
    });
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#shutDown();
    return this.#stopping;
  }

  async run(): Promise<void> {
    await this.start();
    const onSignal = () => {
      // A second signal while stopping cuts the grace period short.
      if (this.#stopController.signal.aborted) this.#outOfTimeController.abort();
      else void this.stop();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    try {
      await this.stopped;
    } finally {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    }
  }

  async #shutDown(): Promise<void> {
    if (this.#status === 'idle') {
      this.#status = 'stopped';
      this.#resolveStopped();
      return;
    }
    await this.#starting?.catch(() => undefined);
    if (this.#status === 'stopped') return;
    this.#status = 'stopping';
    this.#stopController.abort();
    clearInterval(this.#cursorTimer);
    await Promise.all(this.#runners.map((runner) => runner.loopDone));

    const tasks = this.#runners.flatMap((runner) => [...runner.tasks.values()]);
    if (tasks.length > 0) {
      const allDone = Promise.allSettled(tasks.map((task) => task.done));
      const graceOver = sleep(this.#settings.shutdownTimeout, this.#settings.outOfTime).catch(() => undefined);
      await Promise.race([allDone, graceOver]);
      this.#outOfTimeController.abort();
    }
    const unfinished = tasks.filter((task) => !task.finished);
    await Promise.all(unfinished.map((task) => task.handBack()));
    await Promise.all(this.#runners.map((runner) => runner.saveCursor()));
    await Promise.all(this.#runners.map((runner) => runner.closeFeed()));
    this.#status = 'stopped';
    this.#settings.emit({ type: 'stopped', handedBack: unfinished.length });
    this.#resolveStopped();
  }
}

/** Runs one state: reads its feed, claims items, runs up to `concurrency` handlers, keeps the cursor. */
class StateRunner {
  readonly tasks = new Map<string, Task>();
  loopDone: Promise<void> = Promise.resolve();
  #feed: ProcessFeed | undefined;
  #feedQueue: Candidate[] = [];
  #scanQueue: Candidate[] = [];
  /** Feed changes read but not yet settled, oldest first; the cursor moves past settled ones only. */
  #window: FeedEntry[] = [];
  #backlogPending = false;
  #nextRecoveryAt = 0;
  #slotFreed = new Wakeup();
  #cursor: { key: string; version: number | null; position: string | null; saved: string | null };
  #saving: Promise<void> = Promise.resolve();

  constructor(
    private readonly settings: WorkerSettings,
    readonly state: string,
    readonly concurrency: number,
    readonly lease: number,
  ) {
    const key = cursorKey(settings.cursorPrefix, settings.definition.name, state, settings.name);
    this.#cursor = { key, version: null, position: null, saved: null };
  }

  get #batchSize(): number {
    return Math.min(100, Math.max(16, this.concurrency * 2));
  }

  async open(): Promise<void> {
    const { backend, definition, cursors, emit } = this.settings;
    const entry = await cursors.getEntry(this.#cursor.key);
    let position: string | null = null;
    if (entry !== null) {
      this.#cursor.version = entry.version;
      try {
        const parsed = JSON.parse(entry.value) as { position?: unknown };
        if (typeof parsed.position === 'string') position = parsed.position;
      } catch (error) {
        emit({ type: 'error', state: this.state, during: 'reading the cursor', error });
      }
    }
    this.#cursor.position = this.#cursor.saved = position;
    this.#feed = await backend.openFeed(definition.name, this.state, position);
    // Without an exact resume point the feed starts at "now": what already waits is scanned.
    this.#backlogPending = !this.#feed.resumed;
    emit({ type: 'feed-opened', state: this.state, resumed: this.#feed.resumed, durable: this.#feed.durable, position });
  }

  async closeFeed(): Promise<void> {
    await this.#feed?.close().catch((error: unknown) => {
      this.settings.emit({ type: 'error', state: this.state, during: 'closing the feed', error });
    });
  }

  startLoop(): void {
    this.loopDone = this.#loop();
  }

  async #loop(): Promise<void> {
    const { stopping, emit, pollInterval } = this.settings;
    while (!stopping.aborted) {
      try {
        if (this.tasks.size >= this.concurrency) {
          await this.#slotFreed.wait(stopping);
          continue;
        }
        const candidate = this.#scanQueue.shift() ?? this.#feedQueue.shift();
        if (candidate) await this.#claim(candidate);
        else await this.#refill();
      } catch (error) {
        if (stopping.aborted) break;
        emit({ type: 'error', state: this.state, during: 'reading and claiming', error });
        // The backend was closed under the worker (its process is going away): nothing more to do.
        if (isStowageError(error, 'E_CLOSED')) break;
        await sleep(pollInterval, stopping).catch(() => undefined);
      }
    }
  }

  async #refill(): Promise<void> {
    const { backend, definition, recoveryInterval, unclaimedAfter, pollInterval, stopping } = this.settings;
    const now = performance.now();
    if (this.#backlogPending) {
      const found = await backend.findClaimable({
        process: definition.name,
        state: this.state,
        includeUnclaimed: true,
        limit: this.#batchSize,
      });
      if (found.length === 0) this.#backlogPending = false;
      for (const change of found) this.#scanQueue.push({ change, source: 'backlog' });
      return;
    }
    if (now >= this.#nextRecoveryAt) {
      this.#nextRecoveryAt = now + recoveryInterval;
      const found = await backend.findClaimable({
        process: definition.name,
        state: this.state,
        includeUnclaimed: false,
        unclaimedFor: unclaimedAfter,
        limit: this.#batchSize,
      });
      for (const change of found) this.#scanQueue.push({ change, source: 'recovery' });
      if (found.length > 0) return;
    }
    const feed = this.#feed!;
    const wait = Math.max(1, Math.min(pollInterval, Math.ceil(this.#nextRecoveryAt - now)));
    const changes = await feed.read({ limit: this.#batchSize, wait, signal: stopping });
    for (const change of changes) {
      const entry = feed.durable ? { position: change.position, settled: false } : undefined;
      if (entry) this.#window.push(entry);
      this.#feedQueue.push({ change, source: 'feed', ...(entry && { entry }) });
    }
  }

  async #claim(candidate: Candidate): Promise<void> {
    const { backend, definition, owner, emit } = this.settings;
    const { change } = candidate;
    if (this.tasks.has(change.itemId)) {
      this.#settle(candidate);
      return;
    }
    let item: ProcessItem | null;
    try {
      item = await backend.claim({
        process: definition.name,
        itemId: change.itemId,
        state: this.state,
        version: change.version,
        owner,
        lease: this.lease,
      });
    } catch (error) {
      (candidate.source === 'feed' ? this.#feedQueue : this.#scanQueue).unshift(candidate);
      throw error;
    }
    if (item === null) {
      this.#settle(candidate);
      return;
    }
    emit({ type: 'claimed', state: this.state, itemId: item.id, version: item.version, attempt: item.attempts, source: candidate.source });
    const task = new Task(this.settings, item, this.lease);
    this.tasks.set(item.id, task);
    void task.done.finally(() => {
      this.tasks.delete(item.id);
      // A handed-back item stays in the cursor's window, so a restart of this worker replays it.
      if (!task.handedBack) this.#settle(candidate);
      this.#slotFreed.notify();
    });
  }

  #settle(candidate: Candidate): void {
    if (!candidate.entry) return;
    candidate.entry.settled = true;
    while (this.#window[0]?.settled) this.#cursor.position = this.#window.shift()!.position;
  }

  /** Persists the cursor if it moved. Writes are serialised; a failure is reported and retried next time. */
  saveCursor(): Promise<void> {
    this.#saving = this.#saving.then(() => this.#save());
    return this.#saving;
  }

  async #save(): Promise<void> {
    const { cursors, emit, name, owner } = this.settings;
    const cursor = this.#cursor;
    const position = cursor.position;
    if (!this.#feed?.durable || position === null || position === cursor.saved) return;
    const value = JSON.stringify({ position, worker: name, owner });
    try {
      try {
        cursor.version = await cursors.compareAndSet(cursor.key, value, cursor.version);
      } catch (error) {
        if (!isStowageError(error, 'E_VERSION_CONFLICT')) throw error;
        const current = await cursors.getEntry(cursor.key);
        // Another process wrote this worker's cursor: two workers share a name. Any position a
        // worker saved is safe to resume from (it only passed settled changes), so the last
        // write wins, but the misconfiguration is reported. A save of this incarnation's own
        // that was applied without its answer (a connection cut, a failover) is no such sign.
        if (savedBy(current?.value) !== owner) {
          emit({
            type: 'error',
            state: this.state,
            during: `saving the cursor: another process also runs as worker "${name}"`,
            error,
          });
        }
        cursor.version = await cursors.compareAndSet(cursor.key, value, current?.version ?? null);
      }
      cursor.saved = position;
      emit({ type: 'cursor-saved', state: this.state, position });
    } catch (error) {
      emit({ type: 'error', state: this.state, during: 'saving the cursor', error });
    }
  }
}
