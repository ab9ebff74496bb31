import { StowageError, isStowageError } from '../errors.js';
import { describeValue } from '../keys.js';
import type { JsonObject } from '../json.js';
import type { DatabaseTransaction } from '../contracts/common.js';
import type { HandlerContext, HandlerResult, ProcessBackend, ProcessDefinition, ProcessEvent, ProcessItem, StateDefinition } from '../contracts/process.js';
import { resolveRetry } from './define.js';
import { assertItemData, describeError, transitionKey } from './validation.js';
import type { WorkerSettings } from './worker-settings.js';

/** One claimed item: runs its handler while keeping the lease, then applies the result. */
export class Task {
  readonly done: Promise<void>;
  finished = false;
  handedBack = false;
  #controller = new AbortController();
  #extending: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly settings: WorkerSettings,
    private readonly item: ProcessItem,
    private readonly lease: number,
  ) {
    this.done = this.#run().finally(() => {
      this.finished = true;
    });
  }

  get #request() {
    const { definition, owner } = this.settings;
    return { process: definition.name, itemId: this.item.id, version: this.item.version, owner };
  }

  async #run(): Promise<void> {
    const { emit } = this.settings;
    const item = this.item;
    const key = transitionKey(this.settings.definition.name, item.state, item.version, item.id);
    const retry = resolveRetry(this.settings.definition, item.state);
    try {
      if (item.attempts > retry.maxAttempts) {
        // Earlier attempts ended without a result (their workers died): do not run it again.
        const error = `gave up after ${retry.maxAttempts} attempts; the last ones ended without a result${item.lastError ? ` (last error: ${item.lastError})` : ''}`;
        await this.#deadLetter(key, error);
        return;
      }
      if (this.#state.transactional) await this.#runInTransaction(key, retry);
      else await this.#runPlain(key, retry);
    } catch (error) {
      // A write failed (database unreachable, backend closed): the lease runs out and the item is retried.
      emit({ type: 'error', state: item.state, during: `finishing item ${JSON.stringify(item.id)}`, error });
    }
  }

  get #state(): StateDefinition<JsonObject, string> {
    return (this.settings.definition.states as Record<string, StateDefinition<JsonObject, string>>)[this.item.state]!;
  }

  /** The handler, then its result applied with a write of its own. */
  async #runPlain(key: string, retry: Retry): Promise<void> {
    const outcome = await this.#callHandler(key, undefined).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    await this.#extending;
    if (this.handedBack) return;
    if ('error' in outcome) return this.#fail(key, outcome.error, retry);
    const decision = decide(this.item, this.settings.definition, outcome.result);
    if ('invalid' in decision) return this.#fail(key, decision.invalid, retry);
    const { event } = await this.#apply(this.settings.backend, key, decision);
    if (event) this.settings.emit(event);
  }

  /**
   * A `transactional` state: the handler's writes through `context.transaction` and the
   * result's write (the transition, or the release of `{ wait }`) commit together. A failed
   * attempt, an invalid result or a lost race rolls the handler's writes back; the failure is
   * then recorded outside the transaction, as in any state.
   */
  async #runInTransaction(key: string, retry: Retry): Promise<void> {
    const { backend } = this.settings;
    if (!backend.transaction || !backend.withTransaction) {
      throw new StowageError('E_INVALID_OPTION', `state "${this.item.state}" is transactional, but the process backend cannot begin transactions`);
    }
    let outcome: { event?: ProcessEvent; failure?: unknown } = {};
    try {
      await backend.transaction(async (transaction) => {
        outcome = {};
        const result = await this.#callHandler(key, transaction);
        if (this.handedBack) throw ROLL_BACK;
        const decision = decide(this.item, this.settings.definition, result);
        if ('invalid' in decision) {
          outcome = { failure: decision.invalid };
          throw ROLL_BACK;
        }
        const { applied, event } = await this.#apply(backend.withTransaction!(transaction), key, decision);
        outcome = { event };
        if (!applied) throw ROLL_BACK;
      });
    } catch (error) {
      if (error !== ROLL_BACK) outcome = { failure: error };
    }
    // Not awaited inside the transaction: on a pool of one connection (PGlite) a lease extension
    // waits for the transaction's connection.
    await this.#extending;
    if (this.handedBack) return;
    if (outcome.event) this.settings.emit(outcome.event);
    if ('failure' in outcome) await this.#fail(key, outcome.failure, retry);
  }

  /** Runs the handler while keeping the lease; `transaction` is the handler's in a transactional state. */
  async #callHandler(key: string, transaction: DatabaseTransaction | undefined): Promise<HandlerResult<JsonObject, string>> {
    const { outOfTime, name } = this.settings;
    const onOutOfTime = () => this.#controller.abort(new StowageError('E_TIMEOUT', 'the worker is shutting down'));
    outOfTime.addEventListener('abort', onOutOfTime, { once: true });
    const keepAlive = setInterval(() => this.#extendLease(keepAlive), Math.max(1, Math.floor(this.lease / 3)));
    keepAlive.unref();
    const context: HandlerContext = {
      idempotencyKey: key,
      attempt: this.item.attempts,
      signal: this.#controller.signal,
      worker: name,
      ...(transaction && { transaction }),
    };
    try {
      return await Promise.resolve().then(() => this.#state.handler(this.item, context));
    } finally {
      clearInterval(keepAlive);
      outOfTime.removeEventListener('abort', onOutOfTime);
    }
  }

  #extendLease(timer: NodeJS.Timeout): void {
    this.#extending = this.#extending
      .then(() => this.settings.backend.extendLease({ ...this.#request, lease: this.lease }))
      .then(
        (held) => {
          if (held) return;
          clearInterval(timer);
          this.#controller.abort(new StowageError('E_LOCK_LOST', 'the claim on this item was lost'));
        },
        (error: unknown) => {
          this.settings.emit({ type: 'error', state: this.item.state, during: 'extending a lease', error });
          if (!isStowageError(error, 'E_CLOSED')) return;
          // The backend is gone (the process is going away): the claim cannot be kept.
          clearInterval(timer);
          this.#controller.abort(error);
        },
      );
  }

  /**
   * Writes the decided move through `backend` (the backend, or its view in the state's
   * transaction): whether it was applied (not when the item moved on or the claim was lost),
   * and the event to emit.
   */
  async #apply(backend: ProcessBackend, key: string, decision: Move | Wait): Promise<{ applied: boolean; event?: ProcessEvent }> {
    const item = this.item;
    if ('wait' in decision) {
      const released = await backend.release({ ...this.#request, delay: decision.wait, refundAttempt: true });
      return released ? { applied: true, event: { type: 'waiting', state: item.state, itemId: item.id, delay: decision.wait } } : { applied: false };
    }
    const { to, data } = decision;
    const moved = await backend.transition({ process: this.settings.definition.name, itemId: item.id, from: item.state, version: item.version, to, ...(data !== undefined && { data }), kind: 'advance', key });
    if (moved === null) return { applied: false, event: { type: 'conflict', state: item.state, itemId: item.id, version: item.version } };
    return { applied: true, event: { type: 'advanced', state: item.state, itemId: item.id, to, version: moved.version, key } };
  }

  async #fail(key: string, error: unknown, retry: Retry): Promise<void> {
    const { backend, emit } = this.settings;
    const item = this.item;
    const message = describeError(error);
    if (item.attempts >= retry.maxAttempts) {
      await this.#deadLetter(key, message);
      return;
    }
    const delay = retry.delay(item.attempts);
    if (await backend.release({ ...this.#request, delay, refundAttempt: false, error: message })) {
      emit({ type: 'retry', state: item.state, itemId: item.id, attempt: item.attempts, delay, error: message });
    }
  }

  async #deadLetter(key: string, error: string): Promise<void> {
    const { backend, definition, emit } = this.settings;
    const item = this.item;
    const moved = await backend.transition({
      process: definition.name,
      itemId: item.id,
      from: item.state,
      version: item.version,
      to: definition.deadLetter,
      kind: 'dead-letter',
      key,
      error,
    });
    if (moved === null) emit({ type: 'conflict', state: item.state, itemId: item.id, version: item.version });
    else emit({ type: 'dead-lettered', state: item.state, itemId: item.id, attempt: item.attempts, error });
  }

  /** Shutdown ran out of time: abort the handler and give the item back at once, attempt refunded. */
  async handBack(): Promise<void> {
    const { backend, emit } = this.settings;
    this.handedBack = true;
    this.#controller.abort(new StowageError('E_TIMEOUT', 'the worker is shutting down'));
    try {
      await this.#extending;
      if (await backend.release({ ...this.#request, delay: 0, refundAttempt: true })) {
        emit({ type: 'handed-back', state: this.item.state, itemId: this.item.id, version: this.item.version });
      }
    } catch (error) {
      emit({ type: 'error', state: this.item.state, during: 'handing an item back', error });
    }
  }
}

type Retry = ReturnType<typeof resolveRetry>;
type Move = { to: string; data?: JsonObject };
type Wait = { wait: number };

/** Thrown inside a transactional state's transaction to roll it back; never leaves the task. */
const ROLL_BACK = Symbol('roll back');

/** What a handler's result asks for, checked: a move, a wait, or an invalid result (a failed attempt). */
function decide(item: ProcessItem, definition: ProcessDefinition, result: HandlerResult<JsonObject, string>): Move | Wait | { invalid: StowageError } {
  const invalid = (message: string) => ({ invalid: new StowageError('E_INVALID_VALUE', message) });
  if (typeof result === 'string') result = { to: result };
  if (result !== null && typeof result === 'object' && 'wait' in result) {
    const delay = result.wait;
    return Number.isSafeInteger(delay) && delay >= 0 ? { wait: delay } : invalid(`wait must be a non-negative integer number of ms, got ${describeValue(delay)}`);
  }
  if (result === null || typeof result !== 'object' || !('to' in result)) {
    return invalid(`the handler of "${item.state}" returned ${describeValue(result)}, not a state, { to } or { wait }`);
  }
  const { to, data } = result;
  const known = (definition.activeStates as readonly string[]).includes(to) || (definition.terminal as readonly string[]).includes(to);
  if (!known || to === item.state) {
    return invalid(`the handler of "${item.state}" returned ${describeValue(to)}, which is ${known ? 'the current state (return { wait } to run again later)' : 'not a state of the process'}`);
  }
  if (data !== undefined) {
    try {
      assertItemData(data);
    } catch (error) {
      return { invalid: error as StowageError };
    }
  }
  return data === undefined ? { to } : { to, data };
}
