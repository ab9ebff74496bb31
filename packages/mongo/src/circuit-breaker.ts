import {
  assertCircuitState,
  assertMaxFailures,
  assertOptionalDuration,
  assertValidKey,
  effectiveCircuitState,
  StowageError,
  describeType,
  type CircuitBreakerPersistedState,
  type CircuitBreakerStore,
  type CircuitState,
  type RecordFailureOptions,
} from '@stowage/core';
import type { Document } from 'mongodb';
import { ServerTime, expiresIn } from './clock.js';
import { upsertById } from './errors.js';
import { MongoResource, type MongoStoreOptions } from './resource.js';

/** One circuit (seed 001's circuit document, times as BSON dates on the server's clock). */
export interface CircuitDocument {
  _id: string;
  state: CircuitState;
  failureCount: number;
  lastFailureTime?: Date;
  lastSuccessTime?: Date;
  /** While `open`: from this server time on, the circuit reads `half-open`. */
  openUntil?: Date;
}

export type MongoCircuitBreakerStoreOptions = MongoStoreOptions;

/** `$expr`: the stored circuit reads `open` now (it is open and its cool-down has not ended). */
const READS_OPEN = {
  $and: [
    { $eq: ['$state', 'open'] },
    { $not: [{ $and: [{ $eq: [{ $type: '$openUntil' }, 'date'] }, { $lte: ['$openUntil', '$$NOW'] }] }] },
  ],
};

/** `$expr`: what the stored circuit reads as now (`half-open` once an open circuit's cool-down ended). */
const READ_STATE = {
  $cond: [
    { $and: [{ $eq: ['$state', 'open'] }, { $eq: [{ $type: '$openUntil' }, 'date'] }, { $lte: ['$openUntil', '$$NOW'] }] },
    'half-open',
    '$state',
  ],
};

/**
 * {@link CircuitBreakerStore} on one collection (default `stowage_circuit`). `recordFailure` is
 * one atomic command: the count goes up on the server, so concurrent failures never lose an
 * increment and exactly one caller gets the count that opened the circuit; the cool-down and
 * the half-open transition are decided on the server's clock, so every process agrees.
 */
export class MongoCircuitBreakerStore extends MongoResource<CircuitDocument> implements CircuitBreakerStore {
  constructor(options: MongoCircuitBreakerStoreOptions) {
    super('MongoCircuitBreakerStore', 'circuitBreaker', options);
  }

  async getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      if (time.dialect === 'pipeline') {
        // One aggregate command: the server reads the state as of $$NOW.
        const projection = { state: READ_STATE, failureCount: 1, lastFailureTime: 1, lastSuccessTime: 1, openUntil: 1 };
        const [document] = await collection.aggregate<CircuitDocument>([{ $match: { _id: key } }, { $project: projection }]).toArray();
        return document ? toState(document) : null;
      }
      const document = await collection.findOne({ _id: key });
      if (document === null) return null;
      const state = toState(document);
      state.state = effectiveCircuitState(state.state, state.openUntil, time.now().getTime());
      return state;
    });
  }

  async setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertCircuitState(state);
    const document: Omit<CircuitDocument, '_id'> = { state: state.state, failureCount: state.failureCount };
    if (state.lastFailureTime !== undefined) document.lastFailureTime = new Date(state.lastFailureTime);
    if (state.lastSuccessTime !== undefined) document.lastSuccessTime = new Date(state.lastSuccessTime);
    if (state.openUntil !== undefined) document.openUntil = new Date(state.openUntil);
    await this.run(({ collection }) => upsertById(() => collection.replaceOne({ _id: key }, document, { upsert: true })));
  }

  async recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertMaxFailures(maxFailures);
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', `recordFailure options must be an object, got ${describeType(options)}`);
    }
    const cooldown = options?.cooldown;
    assertOptionalDuration(cooldown, 'cooldown');
    return this.run(async ({ collection, time }) => {
      if (time.dialect === 'pipeline') {
        // Stage 1 counts; stage 2 decides, on the new count and the state as it reads at $$NOW,
        // whether this failure opens the circuit; stage 3 applies that decision.
        const document = await upsertById(() =>
          collection.findOneAndUpdate(
            { _id: key },
            [
              {
                $set: {
                  failureCount: { $add: [{ $ifNull: ['$failureCount', 0] }, 1] },
                  lastFailureTime: '$$NOW',
                  state: { $ifNull: ['$state', 'closed'] },
                },
              },
              { $set: { opens: { $and: [{ $gte: ['$failureCount', maxFailures] }, { $not: [READS_OPEN] }] } } },
              {
                $set: {
                  state: { $cond: ['$opens', 'open', '$state'] },
                  openUntil: { $cond: ['$opens', cooldown === undefined ? '$$REMOVE' : expiresIn(cooldown), '$openUntil'] },
                },
              },
              { $unset: 'opens' },
            ],
            { upsert: true, returnDocument: 'after', projection: { failureCount: 1 } },
          ),
        );
        return document!.failureCount;
      }
      // Classic dialect: the count is one atomic $inc; opening is a second, conditional command
      // run only by callers whose count reached maxFailures, and only the first of them matches.
      const now = time.now();
      const counted = await upsertById(() =>
        collection.findOneAndUpdate(
          { _id: key },
          { $inc: { failureCount: 1 }, $set: { lastFailureTime: now }, $setOnInsert: { state: 'closed' } },
          { upsert: true, returnDocument: 'after' },
        ),
      );
      const failureCount = counted!.failureCount;
      if (failureCount >= maxFailures) {
        const notOpen: Document = {
          $or: [{ state: { $ne: 'open' } }, { openUntil: { $lte: now } }],
        };
        const open: Document =
          cooldown === undefined
            ? { $set: { state: 'open' }, $unset: { openUntil: '' } }
            : { $set: { state: 'open', openUntil: ServerTime.after(now, cooldown) } };
        await collection.updateOne({ _id: key, failureCount: { $gte: maxFailures }, ...notOpen }, open);
      }
      return failureCount;
    });
  }

  async recordSuccess(key: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    await this.run(({ collection }) =>
      upsertById(() =>
        collection.updateOne(
          { _id: key },
          { $set: { state: 'closed', failureCount: 0 }, $currentDate: { lastSuccessTime: true }, $unset: { openUntil: '' } },
          { upsert: true },
        ),
      ),
    );
  }

  async delete(key: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    await this.run(({ collection }) => collection.deleteOne({ _id: key }));
  }
}

function toState(document: Partial<CircuitDocument>): CircuitBreakerPersistedState {
  const state: CircuitBreakerPersistedState = { state: document.state!, failureCount: document.failureCount! };
  if (document.lastFailureTime) state.lastFailureTime = document.lastFailureTime.getTime();
  if (document.lastSuccessTime) state.lastSuccessTime = document.lastSuccessTime.getTime();
  if (document.openUntil) state.openUntil = document.openUntil.getTime();
  return state;
}
