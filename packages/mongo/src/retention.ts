import { clearInBatches } from '@stowage/core/adapter';
import type { Collection, Filter } from 'mongodb';

/*
 * The deletes of retention (`snapshotRetention`, `historyRetention`; the options, their checks
 * and `clearFinished()`/`clearHistory()` are the kit's). A TTL index is not used for them: it
 * cannot be scoped to one store's prefix or differ between stores of one collection, and
 * FerretDB 1.x and jongodb have no TTL monitor (`features.ttlMonitor`). So a store with a
 * retention deletes in bounded batches, on demand and from the kit's background sweeper.
 */

/** Documents per delete: each batch is one `find` of `_id`s on an index and one `deleteMany`. */
export const RETENTION_BATCH = 1_000;

/**
 * Deletes the documents matching `filter`, {@link RETENTION_BATCH} at a time (the `find` uses
 * the filter's index; the `deleteMany` repeats the filter, so a document written meanwhile is
 * kept), until a batch deletes fewer or `stop` aborts (a store's `close()`); how many were
 * deleted.
 */
export function deleteInBatches<TDocument extends { _id: string }>(
  collection: Collection<TDocument>,
  filter: Filter<TDocument>,
  stop?: AbortSignal,
): Promise<number> {
  return clearInBatches(async () => {
    const batch = await collection.find(filter, { projection: { _id: 1 } }).limit(RETENTION_BATCH).toArray();
    if (batch.length === 0) return 0;
    const ids = batch.map((document) => document._id);
    return (await collection.deleteMany({ $and: [filter, { _id: { $in: ids } }] } as Filter<TDocument>)).deletedCount;
  }, RETENTION_BATCH, stop);
}
