import { batchChannel, type BatchMessage, type StoreIdentity } from '../diagnostics.js';
import { isStowageError } from '../errors.js';

/**
 * Point operations that arrive in the same tick go out as one statement. Calls collected
 * while the current synchronous run lasts are flushed in a microtask: a lone call goes out
 * alone as its single statement (a microtask later, no timer), several go out as one batch.
 *
 * Each caller gets the outcome it would have had alone: its own result from the batch, and
 * when the batch fails for a reason that may belong to one entry (a value the database
 * refuses), every call is run again on its own, so one bad entry never fails its neighbours.
 * A batch that failed because the database is unreachable, timed out or the store closed is
 * not retried: every caller gets that error, as it would have alone.
 *
 * Each flush's size is published on the `stowage:batch` channel (only while someone subscribes)
 * under the store and operation given as `batches`.
 */
export class Coalescer<TInput, TOutput> {
  readonly #runOne: (input: TInput) => Promise<TOutput>;
  readonly #runBatch: (inputs: TInput[]) => Promise<TOutput[]>;
  readonly #mapError: (error: unknown) => unknown;
  readonly #batches: Omit<BatchMessage, 'size'> | undefined;
  #pending: Call<TInput, TOutput>[] | undefined;

  /**
   * `mapError` turns a backend error into the `StowageError` the caller would get (the store's
   * mapping); `batches` names the store and operation whose flushes telemetry reports.
   */
  constructor(
    runOne: (input: TInput) => Promise<TOutput>,
    runBatch: (inputs: TInput[]) => Promise<TOutput[]>,
    mapError: (error: unknown) => unknown,
    batches?: { store: StoreIdentity; operation: string },
  ) {
    this.#runOne = runOne;
    this.#runBatch = runBatch;
    this.#mapError = mapError;
    this.#batches = batches;
  }

  run(input: TInput): Promise<TOutput> {
    return new Promise<TOutput>((resolve, reject) => {
      if (this.#pending === undefined) {
        this.#pending = [];
        queueMicrotask(() => this.#flush());
      }
      this.#pending.push({ input, resolve, reject });
    });
  }

  #flush(): void {
    const calls = this.#pending!;
    this.#pending = undefined;
    if (this.#batches && batchChannel.hasSubscribers) batchChannel.publish({ ...this.#batches, size: calls.length } satisfies BatchMessage);
    if (calls.length === 1) {
      this.#settle(calls[0]!, this.#runOne(calls[0]!.input));
      return;
    }
    this.#runBatch(calls.map((call) => call.input)).then(
      (outputs) => calls.forEach((call, index) => call.resolve(outputs[index]!)),
      (error: unknown) => {
        if (isAboutTheConnection(this.#mapError(error))) for (const call of calls) call.reject(error);
        else for (const call of calls) this.#settle(call, this.#runOne(call.input));
      },
    );
  }

  #settle(call: Call<TInput, TOutput>, outcome: Promise<TOutput>): void {
    outcome.then(call.resolve, call.reject);
  }
}

interface Call<TInput, TOutput> {
  input: TInput;
  resolve: (output: TOutput) => void;
  reject: (error: unknown) => void;
}

/** Errors every call of the batch would have had alone: retrying each would only multiply the load. */
function isAboutTheConnection(error: unknown): boolean {
  return isStowageError(error, 'E_UNAVAILABLE') || isStowageError(error, 'E_TIMEOUT') || isStowageError(error, 'E_CLOSED');
}
