import { StowageError } from '@stowage/core';
import { assertOptionalDuration, describeType } from '@stowage/core/adapter';
import type { Collection, Filter } from 'mongodb';

/*
 * The background sweeper, and the retention deletes it runs: finished snapshots
 * (`snapshotRetention`) and the process backend's transition history (`historyRetention`), the
 * options and semantics of @stowage/postgres. A TTL index is not used for them: it cannot be
 * scoped to one store's prefix or differ between stores of one collection, and FerretDB 1.x and
 * jongodb have no TTL monitor (`features.ttlMonitor`). So a store with a retention deletes in
 * bounded batches, on demand (`clearFinished()`, `clearHistory()`) and from an `unref`'d timer
 * every `cleanupInterval` ms (the option of every store, as on Postgres; see {@link sweepEvery}).
 */

/** Documents per delete: each batch is one `find` of `_id`s on an index and one `deleteMany`. */
export const RETENTION_BATCH = 1_000;

/** A retention period: undefined, or a positive integer number of ms (`E_INVALID_OPTION` otherwise). */
export function retentionOf(value: unknown, what: string): number | undefined {
  assertOptionalDuration(value, what);
  return value;
}

/** `snapshotRetention.finishedAfter` as given (`E_INVALID_OPTION` unless an object with a positive duration). */
export function finishedAfterOf(retention: unknown): number | undefined {
  if (retention === undefined) return undefined;
  if (retention === null || typeof retention !== 'object' || Array.isArray(retention)) {
    throw new StowageError('E_INVALID_OPTION', `snapshotRetention must be an object: { finishedAfter: ms }, got ${describeType(retention)}`);
  }
  return retentionOf((retention as { finishedAfter?: unknown }).finishedAfter, 'snapshotRetention.finishedAfter');
}

/**
 * Deletes the documents matching `filter`, {@link RETENTION_BATCH} at a time (the `find` uses
 * the filter's index; the `deleteMany` repeats the filter, so a document written meanwhile is
 * kept), until a batch comes back short; how many were deleted.
 */
export async function deleteInBatches<TDocument extends { _id: string }>(
  collection: Collection<TDocument>,
  filter: Filter<TDocument>,
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const batch = await collection.find(filter, { projection: { _id: 1 } }).limit(RETENTION_BATCH).toArray();
    if (batch.length === 0) return deleted;
    const ids = batch.map((document) => document._id);
    deleted += (await collection.deleteMany({ $and: [filter, { _id: { $in: ids } }] } as Filter<TDocument>)).deletedCount;
    if (batch.length < RETENTION_BATCH) return deleted;
  }
}

/**
 * Runs `run` (a store's own call: `snapshots.clearFinished`, `process.clearHistory`) every
 * `interval` ms on a timer that never keeps the process alive, one run at a time; returns the
 * stop function the store's `close()` calls. A failed run waits for the next one. It goes
 * through the store's call, so telemetry sees every failure as that call's error (the
 * `stowage:operation` channel); a failure no retry fixes (`E_INVALID_OPTION`: a missing
 * privilege) is also a process warning (`StowageWarning`), once until a run succeeds again.
 */
export function sweepEvery(run: () => Promise<unknown>, interval: number, what: string): () => void {
  let running = false;
  let warned = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void run()
      .then(
        () => void (warned = false),
        (error: unknown) => {
          if (warned || !(error instanceof StowageError) || error.code !== 'E_INVALID_OPTION') return;
          warned = true;
          process.emitWarning(
            `the background sweeper of ${what} cannot run (${error.code}): ${error.message}. ` +
              `It tries again every ${interval} ms; fix the cause, or turn the sweeper off (cleanupInterval: false)`,
            { type: 'StowageWarning', code: 'STOWAGE_SWEEP_FAILED' },
          );
        },
      )
      .finally(() => (running = false));
  }, interval);
  timer.unref();
  return () => clearInterval(timer);
}
