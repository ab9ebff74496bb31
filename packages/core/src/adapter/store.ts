import type { Capabilities } from '../capabilities.js';
import type { StowageResource } from '../contracts/common.js';
import { operationChannel, type OperationMessage, type StoreIdentity } from '../diagnostics.js';
import { StowageError, closedError } from '../errors.js';

/**
 * What telemetry may say about a call's subject: the key (or id) of a single-key call, or the
 * entries of a batch call (only their count is reported). Unvalidated, as the caller passed it.
 */
export type OperationSubject = string | readonly unknown[] | undefined;

/**
 * What a store needs of its backend besides its contract's `_` operations: the handle. A
 * backend writes it once (its connection or pool, its tables or collections, its error
 * mapping) and hands one to each store it builds; {@link StoreBase} wires every store from it,
 * so a store class holds only its operations.
 */
export interface StoreHandle {
  /** What the backend can do (a backend that detects them answers once ready). */
  readonly capabilities: Capabilities;
  /** Connects and creates what the store needs. Idempotent; every operation awaits it. */
  ready(): Promise<unknown>;
  /** The caller's error for what the driver threw: a `StowageError` with the driver's error as `cause`. */
  toStowageError(error: unknown): unknown;
  /** Frees what the store opened (its share of a pool, a listener, timers). Runs once, after every call settled. */
  close(): Promise<void>;
  /**
   * Runs `fn` in a new transaction: commits when it resolves, rolls back when it rejects, and
   * may run it again when the database asks (never after a commit). Absent where the backend
   * cannot begin transactions. The kit's `runOnce` and transactional process states use it.
   */
  transaction?<T>(fn: (transaction: object) => Promise<T>): Promise<T>;
}

/** The handle of a store that needs no connection (in-memory, or a backend opened by its caller). */
export function localHandle(capabilities: Capabilities): StoreHandle {
  return { capabilities, ready: async () => {}, toStowageError: (error) => error, close: async () => {} };
}

/** Errors of the caller's own code seen inside a call (see {@link callerError}). */
const callerErrors = new WeakSet<object>();

/**
 * Marks `error` as the caller's own (thrown by a `getOrSet` loader, a `withLock` or `runOnce`
 * function, or an abort signal's reason) and returns it: it reaches the caller unchanged, never
 * mapped as if the database had thrown it (an HTTP client's `ECONNREFUSED` is not the
 * database's). The error keeps its identity, so a driver's transaction retry still sees it.
 */
export function callerError(error: unknown): unknown {
  if (typeof error === 'object' && error !== null) callerErrors.add(error);
  return error;
}

/** Runs the caller's function `fn`; what it throws is the caller's own error (see {@link callerError}). */
export async function callerCode<T>(fn: () => T | Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    throw callerError(error);
  }
}

/**
 * What every stowage contract object shares, whatever the backend: the open/closed state, the
 * calls in flight, and how an error leaves it. Every public method of a kit base class runs
 * its work through {@link StoreBase.call}, so an adapter never checks state itself.
 *
 * `close()` is idempotent. From its first call every new call rejects with `E_CLOSED`; waits
 * that could last long (a lock acquisition with `wait`) end at once with `E_CLOSED`; calls
 * already sent to the database finish as they would have; then the handle's `close()` frees
 * what it opened, and only then does `close()` resolve. Nothing is left pending.
 *
 * Telemetry lives here too: each call is published on the `stowage:operation` tracing channel
 * under its operation name (see `@stowage/core/telemetry`), only while someone subscribes.
 */
export abstract class StoreBase implements StowageResource {
  /** Names the object in errors, e.g. "PostgresKeyValueStore". */
  readonly #name: string;
  /** The backend under the store (see {@link StoreHandle}). */
  protected readonly handle: StoreHandle;
  /** The contract's name in operation names: `'kv'` for `'kv.get'`. */
  readonly #contract: string;
  /** The name, database system and table or collection telemetry reports; one frozen object per store. */
  protected readonly identity: StoreIdentity;
  readonly #closeController = new AbortController();
  #closing: Promise<void> | undefined;
  #inFlight = 0;
  #idle: (() => void) | undefined;

  /**
   * `identity` is the store's name in errors (`"MyKeyValueStore"`), or that name with what
   * telemetry reports about the store: `{ name, system: 'postgresql', collection: 'my_table' }`.
   * `contract` prefixes its operation names (`'kv'`).
   */
  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, contract: string) {
    this.identity = Object.freeze(typeof identity === 'string' ? { name: identity } : { ...identity });
    this.#name = this.identity.name;
    this.handle = handle;
    this.#contract = contract;
  }

  get capabilities(): Capabilities {
    return this.handle.capabilities;
  }

  /** Connects and creates what the store needs; every operation awaits it, so call it only to fail fast at start-up. */
  ready(): Promise<void> {
    return this.call(`${this.#contract}.ready`, async () => {
      await this.handle.ready();
    });
  }

  /** True from the first `close()` call on. */
  get isClosed(): boolean {
    return this.#closing !== undefined;
  }

  /** Aborts (with an `E_CLOSED` error as its reason) when `close()` is called: waits listen to it. */
  protected get closeSignal(): AbortSignal {
    return this.#closeController.signal;
  }

  /**
   * Runs one public operation: rejects with `E_CLOSED` once closed, counts the call as in
   * flight until it settles, and turns what the backend threw into a `StowageError` (see
   * {@link toStowageError}). Validation errors thrown synchronously by `run` become
   * rejections, as every stowage method reports errors.
   *
   * `operation` names the call for telemetry, `<contract>.<method>` (`'kv.get'`); `subject` is
   * its key or its batch (see {@link OperationSubject}).
   */
  protected async call<T>(operation: string, run: () => Promise<T> | T, subject?: OperationSubject): Promise<T> {
    if (this.#closing !== undefined) throw closedError(this.#name);
    this.#inFlight++;
    try {
      return await (operationChannel.hasSubscribers ? this.#traced(operation, run, subject) : run());
    } catch (error) {
      throw this.#mapError(error);
    } finally {
      if (--this.#inFlight === 0) this.#idle?.();
    }
  }

  /**
   * For work that belongs to a call already in flight (the handle `withLock` passes to its
   * function, which must still release while `close()` waits for it): maps errors like
   * {@link call}, but refuses nothing and is not counted again.
   */
  protected async withinCall<T>(operation: string, run: () => Promise<T>, subject?: OperationSubject): Promise<T> {
    try {
      return await (operationChannel.hasSubscribers ? this.#traced(operation, run, subject) : run());
    } catch (error) {
      throw this.#mapError(error);
    }
  }

  /** `run` as a trace of the `stowage:operation` channel; its error is mapped inside, so subscribers see the `StowageError`. */
  #traced<T>(operation: string, run: () => Promise<T> | T, subject: OperationSubject): Promise<T> {
    const message: OperationMessage = { store: this.identity, operation };
    if (typeof subject === 'string') message.key = subject;
    else if (Array.isArray(subject)) message.batchSize = subject.length;
    return operationChannel.tracePromise(async () => {
      try {
        return await run();
      } catch (error) {
        throw this.#mapError(error);
      }
    }, message);
  }

  /** Throws `E_CLOSED` once closed; for the rare synchronous entry point. */
  protected assertOpen(): void {
    if (this.#closing !== undefined) throw closedError(this.#name);
  }

  /**
   * The same store, with every call running inside a transaction the caller already holds (a
   * checked-out `pg` client between `BEGIN` and `COMMIT`, a MongoDB `ClientSession` with a
   * started transaction): its writes commit or roll back with the caller's, and its reads see
   * the transaction's own writes. The view sends each call on its own (no coalescing), and
   * closing it closes nothing. Stores whose promise cannot live in a transaction (a lease
   * would vanish on rollback) refuse with `E_INVALID_OPTION`.
   */
  withTransaction(transaction: unknown): this {
    this.assertOpen();
    if (!this._bind) throw new StowageError('E_INVALID_OPTION', `${this.#name} cannot join a transaction`);
    if (transaction === null || typeof transaction !== 'object') {
      throw new StowageError('E_INVALID_OPTION', 'withTransaction needs the transaction the caller holds (a pg client or a MongoDB session)');
    }
    return this._bind(transaction);
  }

  /** The store bound to the caller's transaction (see {@link withTransaction}); a backend that can join one implements it. */
  protected _bind?(transaction: object): this;

  /**
   * Runs `fn` in a new transaction on the store's own connection (see {@link StoreHandle.transaction}),
   * with the store's view bound to it: what `runOnce` and transactional process states are
   * built on. `E_INVALID_OPTION` where the backend cannot begin transactions.
   */
  protected runInTransaction<T>(fn: (view: this, transaction: object) => Promise<T>): Promise<T> {
    if (!this.handle.transaction || !this._bind) {
      return Promise.reject(new StowageError('E_INVALID_OPTION', `${this.#name} cannot begin transactions on this database`));
    }
    return this.handle.transaction((transaction) => fn(this._bind!(transaction), transaction));
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closeController.abort(closedError(this.#name));
    if (this.#inFlight > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
    await this.handle.close();
  }

  /** The caller's error for what a backend operation threw (see {@link StoreHandle.toStowageError}). */
  protected toStowageError(error: unknown): unknown {
    return this.handle.toStowageError(error);
  }

  #mapError(error: unknown): unknown {
    if (error instanceof StowageError || (typeof error === 'object' && error !== null && callerErrors.has(error))) return error;
    // An operation cut short by close() (a pool ended under it) reports the close, not the driver's words.
    if (this.#closing !== undefined) {
      const mapped = this.toStowageError(error);
      if (mapped instanceof StowageError && mapped.code !== 'E_UNAVAILABLE') return mapped;
      return new StowageError('E_CLOSED', `${this.#name} is closed`, { cause: error });
    }
    return this.toStowageError(error);
  }
}
