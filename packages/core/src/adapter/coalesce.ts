import { setImmediate } from 'node:timers';
import { batchChannel, type BatchMessage, type StoreIdentity } from '../diagnostics.js';
import { isStowageError } from '../errors.js';

/** One kind of point operation a store coalesces (`kv.get`, `kv.set`…): how it runs alone and as a batch. */
export interface CoalescedOperation<TInput, TOutput> {
  /** The operation's name for telemetry (`kv.get`). */
  name: string;
  /** The key a call is about. */
  key(input: TInput): string;
  /** A read: reads of one key do not depend on each other's order (`get` and `exists`). */
  reads?: boolean;
  runOne(input: TInput): Promise<TOutput>;
  /**
   * One statement for several calls, one output per input, in order; inputs may repeat a key.
   * Without it each call runs alone, but still in its round (so in call order). An output of
   * {@link RUN_ALONE} hands that call back: it is run alone, with {@link runOne}.
   */
  runBatch?(inputs: TInput[]): Promise<(TOutput | typeof RUN_ALONE)[]>;
}

/**
 * A batch's output for a call it did not do: the call is run alone. A backend's batch skips the
 * entries whose rows another transaction holds (`FOR UPDATE SKIP LOCKED`), so its neighbours
 * neither wait for that transaction nor fail with it; only that entry's call waits, alone.
 */
export const RUN_ALONE: unique symbol = Symbol('stowage.runAlone');

/**
 * Point operations that arrive in the same tick go out as one statement per kind (for the
 * kinds that have a batch statement). A tick is one turn of the event loop: the calls are
 * flushed on `setImmediate`, after every I/O callback of that turn ran. A server's requests
 * and the driver's replies each arrive in a callback of their own, and Node empties the
 * microtask queue after each one, so a microtask flush would see one call at a time under
 * real traffic (a mean batch of 1.00 at any request rate); a turn's worth of callbacks
 * shares a statement instead. A lone call goes out alone as its single statement, one turn
 * later (no timer); several of a kind go out as one batch.
 *
 * Each caller gets the outcome it would have had alone, as if the calls of the tick had run
 * one after the other in the order they were made: calls of different kinds on one key (a
 * `set` then a `get` of it, a `delete` then a `set`) go out in that order, a round after the
 * other, while everything else of the tick shares a round. When a batch fails for a reason
 * that may belong to one entry (a value the database refuses, or a timeout: one entry's row
 * may be locked by another transaction, and the whole statement waited for it), every call of
 * it is run again on its own, so one bad or locked entry never fails its neighbours. A batch
 * that failed because the database is unreachable or the store closed is not retried: every
 * caller gets that error, as it would have alone.
 *
 * The size of each batch of a kind that has a batch statement (a lone call included) is
 * published on the `stowage:batch` channel (only while someone subscribes) under the store
 * and the operation's name.
 */
export class Coalescer {
  readonly #mapError: (error: unknown) => unknown;
  readonly #store: StoreIdentity;
  #pending: Call[] | undefined;

  /** `mapError` turns a backend error into the `StowageError` the caller would get (the store's mapping). */
  constructor(mapError: (error: unknown) => unknown, store: StoreIdentity) {
    this.#mapError = mapError;
    this.#store = store;
  }

  /** `operation` as a function whose calls are coalesced with the other calls of their tick. */
  operation<TInput, TOutput>(operation: CoalescedOperation<TInput, TOutput>): (input: TInput) => Promise<TOutput> {
    return (input) =>
      new Promise<TOutput>((resolve, reject) => {
        if (this.#pending === undefined) {
          this.#pending = [];
          setImmediate(() => void this.#flush());
        }
        this.#pending.push({ operation, input, resolve, reject } as Call);
      });
  }

  async #flush(): Promise<void> {
    const calls = this.#pending!;
    this.#pending = undefined;
    // A lone call (most calls at low rates) skips the round splitting and its maps.
    if (calls.length === 1) return this.#runBatch(calls[0]!.operation, calls);
    for (const round of rounds(calls)) await this.#run(round);
  }

  /** Runs one round: a batch (or a lone call) per kind of operation, at once; settles every call. */
  async #run(round: Call[]): Promise<void> {
    const byOperation = new Map<CoalescedOperation<unknown, unknown>, Call[]>();
    for (const call of round) {
      const calls = byOperation.get(call.operation);
      if (calls) calls.push(call);
      else byOperation.set(call.operation, [call]);
    }
    await Promise.all([...byOperation].map(([operation, calls]) => this.#runBatch(operation, calls)));
  }

  async #runBatch(operation: CoalescedOperation<unknown, unknown>, calls: Call[]): Promise<void> {
    const eachAlone = async () => void (await Promise.all(calls.map((call) => settle(call, operation.runOne(call.input)))));
    if (!operation.runBatch) return eachAlone();
    if (batchChannel.hasSubscribers) batchChannel.publish({ store: this.#store, operation: operation.name, size: calls.length } satisfies BatchMessage);
    if (calls.length === 1) return eachAlone();
    try {
      const outputs = await operation.runBatch(calls.map((call) => call.input));
      // The calls handed back, by key: each key's in call order, the keys side by side (a call
      // waits only for the transaction that holds its own key).
      const alone = new Map<string, Call[]>();
      calls.forEach((call, index) => {
        const output = outputs[index];
        if (output !== RUN_ALONE) return call.resolve(output);
        const key = operation.key(call.input);
        const ofKey = alone.get(key);
        if (ofKey === undefined) alone.set(key, [call]);
        else ofKey.push(call);
      });
      await Promise.all([...alone.values()].map(async (ofKey) => {
        for (const call of ofKey) await settle(call, operation.runOne(call.input));
      }));
    } catch (error) {
      if (isAboutTheConnection(this.#mapError(error))) for (const call of calls) call.reject(error);
      else await eachAlone();
    }
  }
}

interface Call {
  operation: CoalescedOperation<unknown, unknown>;
  input: unknown;
  resolve: (output: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * The calls of a tick cut into rounds, in call order: a round ends before the first call on a
 * key that an earlier call of the round touched with another kind of operation (two reads of
 * one key do not count).
 */
function rounds(calls: readonly Call[]): Call[][] {
  const result: Call[][] = [[]];
  let touched = new Map<string, CoalescedOperation<unknown, unknown>>();
  for (const call of calls) {
    const key = call.operation.key(call.input);
    const earlier = touched.get(key);
    if (earlier !== undefined && earlier !== call.operation && !(earlier.reads && call.operation.reads)) {
      result.push([]);
      touched = new Map();
    }
    result.at(-1)!.push(call);
    touched.set(key, call.operation);
  }
  return result;
}

async function settle(call: Call, outcome: Promise<unknown>): Promise<void> {
  try {
    call.resolve(await outcome);
  } catch (error) {
    call.reject(error);
  }
}

/**
 * Errors every call of the batch would have had alone: retrying each would only multiply the
 * load. (Not `E_TIMEOUT`: a statement or lock timeout may be one entry's, whose row another
 * transaction holds.)
 */
function isAboutTheConnection(error: unknown): boolean {
  return isStowageError(error, 'E_UNAVAILABLE') || isStowageError(error, 'E_CLOSED');
}
