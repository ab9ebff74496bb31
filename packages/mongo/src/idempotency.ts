import {
  StowageError,
  assertCodec,
  assertOptionalDuration,
  assertReservationToken,
  assertValidDuration,
  assertValidKey,
  encodeValue,
  jsonCodec,
  newOwnerToken,
  type Codec,
  type IdempotencyRecord,
  type IdempotencyStore,
  type Reservation,
} from '@stowage/core';
import type { Document } from 'mongodb';
import { ServerTime, VALUE_IS_LIVE, expiresIn, literal } from './clock.js';
import { isDuplicateKeyError, upsertById } from './errors.js';
import { MongoResource, type MongoStoreOptions, type ReadyStore } from './resource.js';

/**
 * One idempotency record: an in-flight claim (`token`, `expiresAt` = end of the claim) or a
 * completed result (`value` as codec text, `expiresAt` absent for no expiry).
 */
export interface IdempotencyDocument {
  _id: string;
  status: 'in-flight' | 'completed';
  token?: string;
  value?: string;
  expiresAt?: Date;
  /** Server time of the last change. */
  updatedAt: Date;
}

export interface MongoIdempotencyStoreOptions extends MongoStoreOptions {
  /** How results become text. Default: strict JSON. */
  codec?: Codec;
}

/** `$expr`: the record may be claimed (it is new, or its claim or result expired). */
const CLAIMABLE = { $or: [{ $eq: [{ $type: '$status' }, 'missing'] }, { $not: [VALUE_IS_LIVE] }] };

/**
 * {@link IdempotencyStore} on one collection (default `stowage_idempotency`, TTL index on
 * `expiresAt`). `reserve` is one atomic command: exactly one of many concurrent callers gets
 * the claim, the others learn at once whether it is in flight or completed (with the result).
 */
export class MongoIdempotencyStore extends MongoResource<IdempotencyDocument> implements IdempotencyStore {
  readonly #codec: Codec;

  constructor(options: MongoIdempotencyStoreOptions) {
    super('MongoIdempotencyStore', 'idempotency', options);
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
  }

  async get<T = unknown>(key: string): Promise<IdempotencyRecord<T> | null> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      const document = await collection.findOne({ _id: key, status: 'completed', ...time.liveValue() });
      return document && this.#record<T>(document);
    });
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertOptionalDuration(ttl);
    const text = encodeValue(this.#codec, value);
    await this.run(({ collection, time }) =>
      upsertById(() => collection.updateOne({ _id: key }, completedWrite(time, text, ttl), { upsert: true })),
    );
  }

  async delete(key: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    await this.run(({ collection }) => collection.deleteOne({ _id: key }));
  }

  async reserve<T = unknown>(key: string, ttl: number): Promise<Reservation<T>> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertValidDuration(ttl);
    const token = newOwnerToken();
    return this.run(async (ready) => {
      // Two first-time upserts of one key can race to insert; the loser tries again and then
      // finds the winner's record. (MongoDB usually retries such upserts itself.)
      for (let attempt = 1; ; attempt++) {
        try {
          const document =
            ready.time.dialect === 'pipeline' ? await claimPipeline(ready, key, token, ttl) : await claimClassic(ready, key, token, ttl);
          if (document === null) continue; // classic: the expired claim was taken by someone else; look again
          return this.#reservation<T>(document, token);
        } catch (error) {
          if (!isDuplicateKeyError(error) || attempt >= 5) throw error;
        }
      }
    });
  }

  async complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertReservationToken(token);
    assertOptionalDuration(ttl);
    const text = encodeValue(this.#codec, value);
    await this.run(async ({ collection, time }) => {
      // The token holds the claim while nobody else reserved the key since, even past its ttl.
      const result = await collection.updateOne({ _id: key, status: 'in-flight', token }, completedWrite(time, text, ttl));
      if (result.matchedCount === 0) {
        throw new StowageError('E_LOCK_NOT_OWNED', `the reservation of "${key}" is no longer held by this token`);
      }
    });
  }

  async fail(key: string, token: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertReservationToken(token);
    return this.run(async ({ collection }) => {
      return (await collection.deleteOne({ _id: key, status: 'in-flight', token })).deletedCount === 1;
    });
  }

  #record<T>(document: IdempotencyDocument): IdempotencyRecord<T> {
    const record: IdempotencyRecord<T> = { value: this.#codec.decode(document.value!) as T };
    if (document.expiresAt) record.expiresAt = document.expiresAt.getTime();
    return record;
  }

  #reservation<T>(document: IdempotencyDocument, token: string): Reservation<T> {
    if (document.status === 'completed') return { status: 'completed', ...this.#record<T>(document) };
    if (document.token === token) return { status: 'acquired', token };
    return { status: 'in-flight', expiresAt: document.expiresAt!.getTime() };
  }
}

/** Stores a completed result over whatever is there (a claim or an older result). */
function completedWrite(time: ServerTime, text: string, ttl: number | undefined): Document | Document[] {
  if (time.dialect === 'pipeline') {
    return [
      {
        $set: {
          status: 'completed',
          value: literal(text),
          token: '$$REMOVE',
          expiresAt: ttl === undefined ? '$$REMOVE' : expiresIn(ttl),
          updatedAt: '$$NOW',
        },
      },
    ];
  }
  const now = time.now();
  const update: Document = {
    $set: { status: 'completed', value: text, updatedAt: now, ...(ttl === undefined ? {} : { expiresAt: ServerTime.after(now, ttl) }) },
    $unset: { token: '', ...(ttl === undefined ? { expiresAt: '' } : {}) },
  };
  return update;
}

/**
 * Pipeline dialect, one command: the filter always matches (or upserts) the record; the update
 * writes a new claim only when the record is claimable at `$$NOW` and otherwise leaves every
 * field as it is (a no-op write); the returned record says who holds it.
 */
function claimPipeline({ collection }: ReadyStore<IdempotencyDocument>, key: string, token: string, ttl: number) {
  const ifClaimed = (claimed: unknown, kept: unknown) => ({ $cond: ['$claim', claimed, kept] });
  return collection.findOneAndUpdate(
    { _id: key },
    [
      { $set: { claim: CLAIMABLE } },
      {
        $set: {
          status: ifClaimed('in-flight', '$status'),
          token: ifClaimed(literal(token), '$token'),
          value: ifClaimed('$$REMOVE', '$value'),
          expiresAt: ifClaimed(expiresIn(ttl), '$expiresAt'),
          updatedAt: ifClaimed('$$NOW', '$updatedAt'),
        },
      },
      { $unset: 'claim' },
    ],
    { upsert: true, returnDocument: 'after' },
  );
}

/**
 * Classic dialect: one command when the key is new or its record is live (`$setOnInsert`
 * claims a new key and otherwise returns the record untouched); taking over an expired record
 * is a second, conditional command. `null` when someone else took the expired record first.
 */
async function claimClassic({ collection, time }: ReadyStore<IdempotencyDocument>, key: string, token: string, ttl: number) {
  const now = time.now();
  const claim = { status: 'in-flight' as const, token, expiresAt: ServerTime.after(now, ttl), updatedAt: now };
  const existing = await collection.findOneAndUpdate({ _id: key }, { $setOnInsert: claim }, { upsert: true, returnDocument: 'after' });
  const expired = existing?.expiresAt !== undefined && existing.expiresAt !== null && existing.expiresAt <= now;
  if (existing && !expired) return existing;
  return collection.findOneAndUpdate(
    { _id: key, ...time.expiredValue(now) },
    { $set: claim, $unset: { value: '' } },
    { returnDocument: 'after' },
  );
}
