import { StowageError } from '@stowage/core';

/**
 * The background sweeper: removes expired rows (and, where a retention is set, finished
 * snapshots and old transition history) without anyone calling `clearExpired()`.
 *
 * There is one sweeper per table per shared pool (see `SharedPool` in connection/pool.ts), however
 * many stores point at the table: stores on the same settings, several `new …Store()` on the
 * same table, every store of one `connect()`, every store given the same `pg.Pool`. Each store
 * registers the jobs it wants ({@link SweepJob}); jobs with the same key (every key-value store
 * on a table asks for the same `clearExpired`) run once per sweep, by whichever of their stores
 * is still open. The sweeper runs every `cleanupInterval` ms (the shortest its stores asked
 * for), on an `unref`'d timer that never keeps the process alive, and stops when its last store
 * closes. A failed job is retried by the next run; nothing it throws escapes, but nothing is
 * silent either (see {@link TableSweeper.sweep}).
 */

/** One thing a store wants swept on its table. */
export interface SweepJob {
  /** Jobs with the same key on one table are the same work: it runs once per sweep. */
  readonly key: string;
  /** Removes what the job removes (in bounded batches), through the store's own calls. */
  readonly run: () => Promise<unknown>;
}

/** What {@link Sweepers.register} returns: ends the store's part in the sweeper. */
export type SweepRegistration = () => void;

/** The sweeper of one table (see the file comment). */
export class TableSweeper {
  /** The table, as `TableName.key` names it. */
  readonly table: string;
  /** Each job key's registrations, each with the interval its store asked for. */
  readonly #jobs = new Map<string, Set<{ run: () => Promise<unknown>; interval: number }>>();
  readonly #onEmpty: () => void;
  #timer: ReturnType<typeof setInterval> | undefined;
  #interval: number | undefined;
  #running: Promise<void> | undefined;
  /** Job keys whose failure was reported as a process warning, until they succeed again. */
  readonly #warned = new Set<string>();

  constructor(table: string, onEmpty: () => void) {
    this.table = table;
    this.#onEmpty = onEmpty;
  }

  /** Ms between runs: the shortest interval of the registered stores (undefined once none is left). */
  get interval(): number | undefined {
    return this.#interval;
  }

  /** The distinct jobs of a run. */
  get jobKeys(): string[] {
    return [...this.#jobs.keys()];
  }

  add(job: SweepJob, interval: number): SweepRegistration {
    const registration = { run: job.run, interval };
    let registrations = this.#jobs.get(job.key);
    if (!registrations) this.#jobs.set(job.key, (registrations = new Set()));
    registrations.add(registration);
    this.#schedule();
    let removed = false;
    return () => {
      if (removed) return;
      removed = true;
      registrations.delete(registration);
      if (registrations.size === 0 && this.#jobs.get(job.key) === registrations) this.#jobs.delete(job.key);
      this.#schedule();
    };
  }

  /**
   * One run: every distinct job once, one after another (each job's batches are statements of
   * their own, so the pool interleaves the stores' work with them). A run still going when the
   * timer fires again is not doubled: the caller gets the same run. Never rejects.
   *
   * A failed job waits for the next run. Each job runs through its store's own call
   * (`kv.clearExpired`, `process.clearHistory`, …), so telemetry sees every failure as that
   * call's error (the `stowage:operation` channel: spans, `stowage.operation.errors`). A failure
   * no retry fixes (`E_INVALID_OPTION`: a missing privilege or table) is also a process warning
   * (`StowageWarning`), once until the job succeeds again: the rows it should remove pile up
   * meanwhile.
   */
  sweep(): Promise<void> {
    this.#running ??= (async () => {
      try {
        for (const [key, registrations] of [...this.#jobs]) {
          // One store runs the job; a store closing meanwhile (E_CLOSED) hands it to the next.
          for (const registration of [...registrations]) {
            const failure = await registration.run().then(
              () => undefined,
              (error: unknown) => error ?? new Error(String(error)),
            );
            if (failure instanceof StowageError && failure.code === 'E_CLOSED') continue;
            this.#report(key, failure);
            break;
          }
        }
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /** See {@link sweep}: warns once about a job that fails for a reason no retry fixes. */
  #report(key: string, failure: unknown): void {
    if (failure === undefined) {
      this.#warned.delete(key);
      return;
    }
    if (!(failure instanceof StowageError) || failure.code !== 'E_INVALID_OPTION' || this.#warned.has(key)) return;
    this.#warned.add(key);
    process.emitWarning(
      `the background sweeper of table ${this.table} cannot run its job ${key} (${failure.code}): ${failure.message}. ` +
        `It tries again every ${this.#interval} ms; fix the cause, or turn the sweeper off (cleanupInterval: false)`,
      { type: 'StowageWarning', code: 'STOWAGE_SWEEP_FAILED' },
    );
  }

  /** (Re)starts the timer at the shortest interval asked for; stops it, and leaves, when no job is left. */
  #schedule(): void {
    const intervals = [...this.#jobs.values()].flatMap((registrations) => [...registrations].map((registration) => registration.interval));
    const interval = intervals.length === 0 ? undefined : Math.min(...intervals);
    if (interval === this.#interval) return;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#interval = interval;
    if (interval === undefined) {
      this.#onEmpty();
      return;
    }
    this.#timer = setInterval(() => void this.sweep(), interval);
    this.#timer.unref();
  }
}

/** The sweepers of one shared pool, by table. */
export class Sweepers {
  readonly #byTable = new Map<string, TableSweeper>();

  /** Adds `job` to the sweeper of `table` (creating it), run every `interval` ms at most. */
  register(table: string, job: SweepJob, interval: number): SweepRegistration {
    let sweeper = this.#byTable.get(table);
    if (!sweeper) {
      const created = new TableSweeper(table, () => {
        if (this.#byTable.get(table) === created) this.#byTable.delete(table);
        running.delete(created);
      });
      this.#byTable.set(table, (sweeper = created));
      running.add(created);
    }
    return sweeper.add(job, interval);
  }
}

/** Every sweeper of the process that has a job. */
const running = new Set<TableSweeper>();

/**
 * The sweepers of the process that have a job, of `table` (`TableName.key`) or of every table:
 * for tests and diagnostics (`await sweeper.sweep()` runs one at once).
 */
export function activeSweepers(table?: string): TableSweeper[] {
  return [...running].filter((sweeper) => table === undefined || sweeper.table === table);
}
