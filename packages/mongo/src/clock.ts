import type { Collection, Document, Filter } from 'mongodb';
import type { MongoDialect, ServerFeatures } from './server-features.js';

/**
 * Time on the server's clock, in both dialects. Every expiry, lease and cool-down is compared
 * with the server's time, never with the caller's `Date`:
 *
 * - `pipeline`: the command itself says `$$NOW` (update pipelines, `$expr` filters, projections).
 * - `classic`: "now" is the server's `hello.localTime` plus the time elapsed on this process's
 *   monotonic clock (see `MeasuredClock`), accurate to half a round trip. One operation takes
 *   "now" once and uses it for its filter and every date it writes (`expiresAt - updatedAt` is
 *   exactly the ttl).
 *
 * Field conventions: `expiresAt` is a BSON date, or absent for "never" (values), or absent for
 * "not held" (leases).
 */

/** Later than any date a store writes; stands in for "no expiry" inside expressions. */
export const FOREVER = new Date(8_640_000_000_000_000);
/** Earlier than any date a store writes; stands in for "no lease" inside expressions. */
export const EPOCH = new Date(0);

/** `$expr`: a value document with no `expiresAt`, or one later than `$$NOW`. */
export const VALUE_IS_LIVE = { $gt: [{ $ifNull: ['$expiresAt', FOREVER] }, '$$NOW'] };
/** `$expr`: a lease whose `expiresAt` is later than `$$NOW` (absent: released). */
export const LEASE_IS_LIVE = { $gt: [{ $ifNull: ['$expiresAt', EPOCH] }, '$$NOW'] };

/** Pipeline expression: `ttl` ms after `$$NOW`. */
export function expiresIn(ttl: number): Document {
  return { $add: ['$$NOW', ttl] };
}

/** A user-supplied value inside an aggregation expression: never read as a field path or operator. */
export function literal(value: unknown): Document {
  return { $literal: value };
}

export class ServerTime {
  readonly dialect: MongoDialect;
  readonly #features: ServerFeatures;

  constructor(features: ServerFeatures) {
    this.dialect = features.dialect;
    this.#features = features;
  }

  /** The server's time now, estimated on this process (classic dialect). */
  now(): Date {
    return new Date(this.#features.clock.now());
  }

  /** `ms` after `now`, as a date for operator updates (classic dialect). */
  static after(now: Date, ms: number): Date {
    return new Date(now.getTime() + ms);
  }

  /*
   * The filters below take the `now` of the operation (classic dialect), so that every time a
   * command carries, in its filter and its update, is the same instant.
   */

  /** Filter: value documents that have not expired. */
  liveValue(now = this.now()): Document {
    return this.dialect === 'pipeline' ? { $expr: VALUE_IS_LIVE } : { $or: [{ expiresAt: null }, { expiresAt: { $gt: now } }] };
  }

  /**
   * The value document with this `_id` if it has not expired, else `null`. Classic dialect: the
   * filter is the `_id` alone and expiry is checked here, against the same server time a filter
   * would carry, because servers without `$$NOW` (FerretDB 1.x) use the `_id` index only for a
   * filter on `_id` alone and scan the collection for anything more.
   */
  async findLiveValue<T extends Document>(
    collection: Collection<T>,
    _id: string,
    projection?: Document,
  ): Promise<T | null> {
    if (this.dialect === 'pipeline') {
      return (await collection.findOne({ _id, $expr: VALUE_IS_LIVE } as Document as Filter<T>, { projection })) as T | null;
    }
    const now = this.now();
    const document = await collection.findOne({ _id } as Document as Filter<T>, { projection: projection && { ...projection, expiresAt: 1 } });
    return document === null || ServerTime.hasExpired(document, now) ? null : (document as T);
  }

  /** Whether a value document read back had expired at `now` (classic dialect). */
  static hasExpired(document: Document, now: Date): boolean {
    const expiresAt: unknown = document.expiresAt;
    return expiresAt instanceof Date && expiresAt <= now;
  }

  /** Filter: value documents that have expired (and so count as absent). */
  expiredValue(now = this.now()): Document {
    return this.dialect === 'pipeline'
      ? { expiresAt: { $type: 'date' }, $expr: { $lte: ['$expiresAt', '$$NOW'] } }
      : { expiresAt: { $lte: now } };
  }

  /** Filter: leases still held. */
  liveLease(now = this.now()): Document {
    return this.dialect === 'pipeline' ? { $expr: LEASE_IS_LIVE } : { expiresAt: { $gt: now } };
  }

  /** Filter: leases free to take (released, expired, or never taken). */
  freeLease(now = this.now()): Document {
    return this.dialect === 'pipeline'
      ? { $expr: { $not: [LEASE_IS_LIVE] } }
      : { $or: [{ expiresAt: null }, { expiresAt: { $lte: now } }] };
  }
}
