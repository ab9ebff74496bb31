import { StowageError } from '../errors.js';
import { assertOptionalDuration, describeType } from '../keys.js';

/*
 * Retention, the same on every backend: snapshots of finished workflows (`snapshotRetention`)
 * and the process backend's transition history (`historyRetention`) are deleted in bounded
 * batches, on demand (`clearFinished()`, `clearHistory()`) and by the background sweeper
 * (sweeper.ts). The backend writes one batch's statement; the options, the batching and what
 * "finished" means are here.
 */

/**
 * The `execution.status` values of an awaitly snapshot whose workflow will not run again:
 * what snapshot retention deletes. A running or paused workflow's snapshot is never deleted.
 */
export const FINISHED_STATUSES: readonly string[] = Object.freeze(['completed', 'failed']);

/** A retention period (`historyRetention`, `snapshotRetention.finishedAfter`): undefined, or a positive integer number of ms. */
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
 * Runs `batch` (one bounded delete, returning how many it removed) until a batch removes fewer
 * than `batchSize` or `stop` aborts (a store's `close()` returns within one batch's time, never
 * after a whole backlog); how many were removed in all.
 */
export async function clearInBatches(batch: () => Promise<number>, batchSize: number, stop?: AbortSignal): Promise<number> {
  let removed = 0;
  for (;;) {
    const count = await batch();
    removed += count;
    if (count < batchSize || stop?.aborted === true) return removed;
  }
}
