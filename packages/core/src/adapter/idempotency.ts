import type { DatabaseTransaction } from '../contracts/common.js';
import type { IdempotencyRecord, IdempotencyStore, Reservation, RunOnceOptions } from '../contracts/idempotency.js';
import { StowageError } from '../errors.js';
import { assertCodec, decodeValue, encodeValue, jsonCodec, type Codec } from '../json.js';
import { assertOptionalDuration, assertValidDuration, assertValidKey } from '../keys.js';
import { sleep } from '../clock.js';
import { newOwnerToken } from './lock-support.js';
import type { StoreIdentity } from '../diagnostics.js';
import { StoreBase, callerCode, type StoreHandle } from './store.js';

/** A completed result as the backend stores it: the codec's text, expiry in epoch ms (store clock). */
export interface StoredResult {
  text: string;
  expiresAt: number | null;
}

/** What `_claimRun` found or did. */
export type RunClaim = { status: 'claimed' } | { status: 'busy' } | ({ status: 'completed' } & StoredResult);

/** What `_reserve` found or did. */
export type StoredReservation =
  | { status: 'acquired' }
  | { status: 'in-flight'; expiresAt: number }
  | ({ status: 'completed' } & StoredResult);

export interface IdempotencyStoreBaseOptions {
  /** How results become text. Default: strict JSON. */
  codec?: Codec;
}

/**
 * The whole {@link IdempotencyStore} behaviour over a few backend operations: argument checks,
 * reservation tokens and the codec. The backend makes `_reserve` atomic (exactly one
 * concurrent caller gets `acquired`) on the store clock.
 */
export abstract class IdempotencyStoreBase extends StoreBase implements IdempotencyStore {
  readonly #codec: Codec;

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: IdempotencyStoreBaseOptions = {}) {
    super(identity, handle, 'idempotency');
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
  }

  get<T = unknown>(key: string): Promise<IdempotencyRecord<T> | null> {
    return this.call('idempotency.get', async () => {
      assertValidKey(key);
      const stored = await this._get(key);
      return stored === null ? null : this.#record<T>(stored);
    }, key);
  }

  set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    return this.call('idempotency.set', () => {
      assertValidKey(key);
      assertOptionalDuration(ttl);
      return this._set(key, encodeValue(this.#codec, value), ttl);
    }, key);
  }

  delete(key: string): Promise<void> {
    return this.call('idempotency.delete', () => {
      assertValidKey(key);
      return this._delete(key);
    }, key);
  }

  reserve<T = unknown>(key: string, ttl: number): Promise<Reservation<T>> {
    return this.call('idempotency.reserve', async () => {
      assertValidKey(key);
      assertValidDuration(ttl);
      const token = newOwnerToken();
      const found = await this._reserve(key, token, ttl);
      if (found.status === 'acquired') return { status: 'acquired', token };
      if (found.status === 'in-flight') return found;
      return { status: 'completed', ...this.#record<T>(found) };
    }, key);
  }

  complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void> {
    return this.call('idempotency.complete', async () => {
      assertValidKey(key);
      assertReservationToken(token);
      assertOptionalDuration(ttl);
      const text = encodeValue(this.#codec, value);
      if (await this._complete(key, token, text, ttl)) return;
      // A retry of a complete that was applied but whose answer was lost (a connection cut at
      // the commit, a failover) finds exactly its result stored: done, as the caller asked.
      if ((await this._get(key))?.text === text) return;
      throw new StowageError('E_LOCK_NOT_OWNED', `the reservation of "${key}" is no longer held by this token`);
    }, key);
  }

  fail(key: string, token: string): Promise<boolean> {
    return this.call('idempotency.fail', () => {
      assertValidKey(key);
      assertReservationToken(token);
      return this._fail(key, token);
    }, key);
  }

  /**
   * Claims, runs and completes in one transaction (see `IdempotencyStore.runOnce`). Inside it
   * the claim is the key's row: a concurrent runner of the key finds the result once this
   * transaction commits.
   *
   * Waiting for another runner never holds a connection. Runners of one key in this store
   * wait in memory for the attempt already in flight, then try at once (most find its result).
   * Where the backend can tell that another transaction runs the key ({@link _claimRun}: one
   * in another process, or one that began while this runner waited), the runner ends its own
   * transaction and tries again after a pause, instead of waiting inside it for a pooled
   * connection's worth of time that the running `fn` may need itself. `fn`'s own error
   * reaches the caller as it was thrown.
   */
  runOnce<T>(key: string, fn: (transaction: DatabaseTransaction) => Promise<T>, options: RunOnceOptions = {}): Promise<T> {
    return this.call('idempotency.runOnce', async () => {
      assertValidKey(key);
      if (typeof fn !== 'function') throw new StowageError('E_INVALID_OPTION', 'runOnce needs a function to run');
      assertOptionalDuration(options.ttl);
      let waited = false;
      for (let attempt = 0; ; attempt++) {
        const ahead = this.#runs.get(key);
        // After one wait the runner tries at once: the runners woken together try side by side.
        if (ahead !== undefined && !waited) {
          waited = true;
          await settledOrAborted(ahead, this.closeSignal);
          continue;
        }
        const run = this.runInTransaction((store, transaction) => this.#runAttempt(store, transaction, key, fn, options));
        if (ahead === undefined) this.#track(key, run);
        const outcome = await run;
        if (outcome !== RUN_BUSY) return outcome.value;
        waited = false;
        await sleep(runOnceRetryPause(attempt), this.closeSignal);
      }
    }, key);
  }

  /** The attempts of `runOnce` in flight, by key: later runners of the key in this store wait for them. */
  readonly #runs = new Map<string, Promise<unknown>>();

  #track(key: string, run: Promise<unknown>): void {
    this.#runs.set(key, run);
    const forget = () => {
      if (this.#runs.get(key) === run) this.#runs.delete(key);
    };
    run.then(forget, forget);
  }

  /** One transaction of `runOnce`: the stored result, or `fn` run and its result stored, or {@link RUN_BUSY}. */
  async #runAttempt<T>(
    store: this,
    transaction: object,
    key: string,
    fn: (transaction: DatabaseTransaction) => Promise<T>,
    options: RunOnceOptions,
  ): Promise<{ value: T } | typeof RUN_BUSY> {
    const claim = store._claimRun ? await store._claimRun(key) : null;
    if (claim?.status === 'busy') return RUN_BUSY;
    if (claim?.status === 'completed') return { value: this.#record<T>(claim).value };
    const token = newOwnerToken();
    const found = await store._reserve(key, token, RUN_ONCE_CLAIM_TTL);
    if (found.status === 'completed') return { value: this.#record<T>(found).value };
    if (found.status === 'in-flight') throw new StowageError('E_LOCK_NOT_OWNED', `"${key}" is reserved by a reserve() call still in flight`);
    const value = await callerCode(() => fn(transaction));
    // Nobody else can have claimed the key: this transaction holds its row.
    await store._complete(key, token, this.#encodeResult(value), options.ttl);
    return { value };
  }

  /**
   * A `runOnce` result as stored text. A function that returns nothing has a result too: when
   * the codec has no text for `undefined` (JSON has none), it is stored as {@link VOID_RESULT},
   * so the run completes instead of rolling back after `fn`'s side effects.
   */
  #encodeResult(value: unknown): string {
    if (value !== undefined) return encodeValue(this.#codec, value, 'the result');
    try {
      return encodeValue(this.#codec, undefined, 'the result');
    } catch {
      return VOID_RESULT;
    }
  }

  #decodeResult(text: string): unknown {
    if (text === VOID_RESULT) {
      try {
        return this.#codec.decode(text);
      } catch {
        return undefined;
      }
    }
    return decodeValue(this.#codec, text, 'the stored result');
  }

  #record<T>(stored: StoredResult): IdempotencyRecord<T> {
    const record: IdempotencyRecord<T> = { value: this.#decodeResult(stored.text) as T };
    if (stored.expiresAt !== null) record.expiresAt = stored.expiresAt;
    return record;
  }

  // --- backend operations -------------------------------------------------------------

  /** The live completed result; `null` when absent, expired or in flight. */
  protected abstract _get(key: string): Promise<StoredResult | null>;
  /** Stores a completed result over whatever is there. */
  protected abstract _set(key: string, text: string, ttl: number | undefined): Promise<void>;
  protected abstract _delete(key: string): Promise<void>;
  /**
   * Atomically: claims the key for `token` for `ttl` ms when it is absent, expired, or an
   * in-flight claim whose ttl ran out; else reports the live claim or the completed result.
   */
  protected abstract _reserve(key: string, token: string, ttl: number): Promise<StoredReservation>;
  /**
   * Stores the result if `token` still holds the claim (also after its ttl ran out, as long as
   * nobody reserved the key since); false otherwise, and nothing is written.
   */
  protected abstract _complete(key: string, token: string, text: string, ttl: number | undefined): Promise<boolean>;
  /** Drops `token`'s claim; false when it does not hold it. */
  protected abstract _fail(key: string, token: string): Promise<boolean>;
  /**
   * Optional, called on the store's view inside `runOnce`'s transaction before `_reserve`:
   * claims `key` for this transaction without waiting. Reports the live completed result
   * when there is one (whether or not the claim was taken), else `busy` when another
   * transaction holds the claim, else `claimed`. A backend whose `_reserve` would wait for
   * that transaction while holding a pooled connection (Postgres: a row lock) implements it.
   */
  protected _claimRun?(key: string): Promise<RunClaim>;
}

/** Resolves once `promise` settled, whatever its outcome; rejects with the signal's reason when it aborts first. */
function settledOrAborted(promise: Promise<unknown>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const done = () => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    };
    promise.then(done, done);
  });
}

/** What `runOnce`'s transaction returns when another transaction runs the key (see `_claimRun`). */
const RUN_BUSY = Symbol('run busy');

/**
 * The pause before `runOnce` tries a key again that another transaction runs: 5 ms, doubling
 * to 200 ms, with jitter so that many waiters of one key do not come back together.
 */
function runOnceRetryPause(attempt: number): number {
  const ceiling = Math.min(200, 5 * 2 ** attempt);
  return Math.ceil(ceiling / 2 + Math.random() * (ceiling / 2));
}

/**
 * The claim `runOnce` takes inside its transaction. Nobody sees it before the commit, which
 * replaces it with the result, so its length only matters to a transaction left open that long.
 */
const RUN_ONCE_CLAIM_TTL = 10 * 60_000;

/**
 * The stored text of a `runOnce` result that is `undefined` when the codec has no text for
 * it: the empty text, which no JSON text is (a codec that does decode it decides itself).
 */
const VOID_RESULT = '';

/** Throws `E_INVALID_OPTION` unless `token` looks like a reservation token. */
export function assertReservationToken(token: unknown): asserts token is string {
  if (typeof token !== 'string' || token.length === 0 || token.length > 256) {
    throw new StowageError('E_INVALID_OPTION', 'token must be the non-empty string returned by reserve()');
  }
}
