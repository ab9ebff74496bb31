import { IdempotencyStoreBase, type IdempotencyStoreBaseOptions, type StoredReservation, type StoredResult } from '@stowage/core/adapter';
import { mongoStore, storeDatabase, type StoreDatabase } from '../database.js';
import type { IdempotencyDocument } from '../documents.js';
import { isDuplicateKeyError, upsertById } from '../errors.js';
import type { MongoStoreOptions } from '../options.js';
import { readLive } from './values.js';

export interface MongoIdempotencyStoreOptions extends MongoStoreOptions, IdempotencyStoreBaseOptions {}

/**
 * {@link IdempotencyStore} on one collection (default `stowage_idempotency`, TTL index on
 * `expiresAt`). `reserve` is one atomic command: exactly one of many concurrent callers gets
 * the claim, the others learn at once whether it is in flight or completed (with the result).
 */
export class MongoIdempotencyStore extends mongoStore(IdempotencyStoreBase) {
  readonly #db: StoreDatabase<IdempotencyDocument>;

  constructor(options: MongoIdempotencyStoreOptions) {
    const db = storeDatabase<IdempotencyDocument>(options, { kind: 'idempotency', name: 'MongoIdempotencyStore' });
    super(db.identity, db, options);
    this.#db = db;
  }

  /** This store inside the caller's transaction (see `withTransaction`): same collections, every command with the transaction's session. */
  protected override _bind(session: object): this {
    return new MongoIdempotencyStore(this.#db.viewOptions(session)) as this;
  }

  /**
   * A live record with a value: a completed result (an in-flight claim has none). Read with
   * majority read concern: a result the caller acts on ("already done") is one a failover
   * cannot roll back (a local read could return a `complete()` still waiting for its majority).
   */
  protected async _get(key: string): Promise<StoredResult | null> {
    const { collection, dialect } = await this.#db.use();
    const document = await readLive(collection, dialect, key, { status: 1, value: 1 }, MAJORITY_READ);
    return document?.status === 'completed' ? result(document) : null;
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    const update = dialect.setExpiring({ status: 'completed', value: text }, ttl, CLAIM_FIELDS);
    await upsertById(() => collection.updateOne({ _id: key }, update, { upsert: true }));
  }

  protected async _delete(key: string): Promise<void> {
    const { collection } = await this.#db.use();
    await collection.deleteOne({ _id: key });
  }

  /**
   * Two first-time reservations of one key can race to insert; the loser tries again and then
   * finds the winner's record (MongoDB usually retries such upserts itself).
   */
  protected async _reserve(key: string, token: string, ttl: number): Promise<StoredReservation> {
    const { collection, dialect } = await this.#db.use();
    for (let attempt = 1; ; attempt++) {
      try {
        const document = await dialect.reserve(collection, key, token, ttl);
        if (document === null) continue; // someone took over the expired record first: look again
        if (document.status === 'completed') return { status: 'completed', ...result(document) };
        if (document.token === token) return { status: 'acquired' };
        const lease = document.leaseUntil ?? document.expiresAt; // a claim written before claims had `leaseUntil`
        return { status: 'in-flight', expiresAt: lease instanceof Date ? lease.getTime() : 0 };
      } catch (error) {
        if (!isDuplicateKeyError(error) || attempt >= 5) throw error;
      }
    }
  }

  /**
   * The token holds the claim while nobody else reserved the key since, even past its ttl: a
   * claim has no `expiresAt`, so no TTL index removes it under a late `complete`.
   */
  protected async _complete(key: string, token: string, text: string, ttl: number | undefined): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    const update = dialect.setExpiring({ status: 'completed', value: text }, ttl, CLAIM_FIELDS);
    return (await collection.updateOne({ _id: key, status: 'in-flight', token }, update)).matchedCount === 1;
  }

  protected async _fail(key: string, token: string): Promise<boolean> {
    const { collection } = await this.#db.use();
    return (await collection.deleteOne({ _id: key, status: 'in-flight', token })).deletedCount === 1;
  }
}

const MAJORITY_READ = { level: 'majority' } as const;

/** The fields of an in-flight claim, removed when the record becomes a result. */
const CLAIM_FIELDS = ['token', 'leaseUntil'] as const;

function result(document: IdempotencyDocument): StoredResult {
  return { text: document.value!, expiresAt: document.expiresAt?.getTime() ?? null };
}
