import { StowageError } from '@stowage/core';
import { sleep } from '@stowage/core/adapter';
import type { ClientSession, Collection, Document, MongoClient, TransactionOptions, WriteConcernSettings } from 'mongodb';

/*
 * Stores inside a transaction (`withTransaction(session)`, `runOnce`, transactional process
 * states): the transaction is a MongoDB `ClientSession` with a started transaction, and a
 * store's view sends every command with `{ session }`. That happens in one place, the
 * collections the view hands out ({@link sessionBound}), so the stores' code is the same
 * inside and outside a transaction.
 */

/**
 * Where each `Collection` method the stores call takes its options (the index of the argument).
 * Any other method called on a bound collection throws: it would run outside the transaction.
 */
const OPTIONS_ARGUMENT: Readonly<Record<string, number>> = {
  find: 1,
  findOne: 1,
  aggregate: 1,
  countDocuments: 1,
  insertOne: 1,
  insertMany: 1,
  bulkWrite: 1,
  deleteOne: 1,
  deleteMany: 1,
  findOneAndDelete: 1,
  updateOne: 2,
  updateMany: 2,
  replaceOne: 2,
  findOneAndUpdate: 2,
  findOneAndReplace: 2,
  distinct: 2,
};

/**
 * `collection` with `{ session }` added to the options of every command it sends (and cursor it
 * opens), after `check()` (which throws when the session can no longer carry the command).
 */
export function sessionBound<TDocument extends Document>(collection: Collection<TDocument>, session: ClientSession, check: () => void): Collection<TDocument> {
  return new Proxy(collection, {
    get(target, property) {
      // Read on the collection itself: its getters may use private fields a proxy does not have.
      const value: unknown = Reflect.get(target, property);
      if (typeof value !== 'function' || typeof property !== 'string') return value;
      const at = OPTIONS_ARGUMENT[property];
      if (at === undefined) {
        return () => {
          throw new Error(`stowage: Collection.${property} is not bound to the transaction's session`);
        };
      }
      return (...args: unknown[]) => {
        check();
        // Primary explicitly: the driver refuses any other read preference in a transaction, and a
        // session's transaction takes the client's (`secondaryPreferred` in the URL) unless told.
        const options = { ...(args[at] as Document | undefined), session, readPreference: 'primary' };
        const bound = [...args.slice(0, at), ...Array.from({ length: Math.max(0, at - args.length) }, () => undefined), options];
        return (value as (...args: unknown[]) => unknown).apply(target, bound);
      };
    },
  });
}

/**
 * The options of every transaction stowage begins itself (`runOnce`, transactional process
 * states, `setMany`/`deleteMany`, the detection probe), whatever the client's defaults: read
 * preference primary (the driver refuses any other in a transaction, and would take the
 * client's), snapshot reads, and a commit acknowledged with `writeConcern` (the store's,
 * `{ w: 'majority' }` unless told otherwise), so a commit that was acknowledged survives a failover.
 */
function transactionOptions(writeConcern: WriteConcernSettings): TransactionOptions {
  return { readPreference: 'primary', readConcern: { level: 'snapshot' }, writeConcern };
}

/**
 * `operation` in a transaction of a new session of `client` (see {@link transactionOptions}),
 * retried by the driver's `withTransaction` on errors labelled TransientTransactionError; a
 * commit refused with WriteConflict (112) without that label (jongodb answers so; MongoDB labels
 * its conflicts) is tried again here, a few times: nothing of it was applied.
 */
export async function inNewTransaction<T>(client: MongoClient, writeConcern: WriteConcernSettings, operation: (session: ClientSession) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const session = client.startSession();
    try {
      // Kept from the callback: early 6.x drivers resolve `withTransaction` to the commit's reply.
      let result: T | undefined;
      await session.withTransaction(async () => {
        try {
          result = await operation(session);
        } catch (error) {
          throw unwrapTransient(error);
        }
      }, transactionOptions(writeConcern));
      return result as T;
    } catch (error) {
      if ((error as { code?: unknown }).code !== 112 || attempt >= 5) throw error; // see unwrapTransient
    } finally {
      await session.endSession();
    }
    await sleep(Math.random() * 10 * attempt);
  }
}

/**
 * Throws `E_INVALID_OPTION` unless `transaction` is a `ClientSession` of `client` (the driver
 * sends a session only with the client that started it: stores that join one transaction share
 * the caller's `MongoClient`, given as their `client` option).
 */
export function assertSessionOf(transaction: object, client: MongoClient): asserts transaction is ClientSession {
  // `client` is internal in driver 7's types; the driver itself refuses a session of another client.
  const session = transaction as Partial<ClientSession> & { client?: unknown };
  if (typeof session.inTransaction !== 'function' || typeof session.startTransaction !== 'function') {
    throw new StowageError('E_INVALID_OPTION', 'withTransaction needs the MongoDB ClientSession that holds the transaction (client.startSession(), then startTransaction() or withTransaction)');
  }
  if (session.client !== client) {
    throw new StowageError(
      'E_INVALID_OPTION',
      'the session belongs to another MongoClient: a store joins a session of its own client (give the store your client as `client`, and start the session on it)',
    );
  }
}

/** `E_INVALID_OPTION` once the session has no transaction in progress: a command would run on its own. */
export function assertInTransaction(session: ClientSession): void {
  if (!session.inTransaction()) {
    throw new StowageError('E_INVALID_OPTION', 'the session has no transaction in progress: start one (session.startTransaction() or session.withTransaction) before using the store inside it');
  }
}

/** The refusal where the server cannot run multi-document transactions (standalone servers, FerretDB 1.x). */
export function noTransactionsError(): StowageError {
  return new StowageError(
    'E_INVALID_OPTION',
    'this MongoDB server reports it cannot run multi-document transactions (they need a replica set or a sharded cluster; FerretDB 1.x has none)',
  );
}

/**
 * What a transaction's callback throws for `error`: the driver error behind a `StowageError`
 * (its `cause`) when running the transaction again may succeed, so that the retries see it:
 * the driver's `withTransaction` looks for the TransientTransactionError label (a write
 * conflict, a network error) on its own errors, and stowage's own loop (see
 * `StoreConnection.transaction`) for WriteConflict 112, which jongodb sends unlabelled; else
 * `error` itself. The store maps it again on the way out.
 */
export function unwrapTransient(error: unknown): unknown {
  const cause = (error as { cause?: { hasErrorLabel?: unknown; code?: unknown } } | null)?.cause;
  if (!cause) return error;
  if (typeof cause.hasErrorLabel === 'function' && (cause.hasErrorLabel as (label: string) => boolean).call(cause, 'TransientTransactionError')) return cause;
  return error instanceof StowageError && cause.code === 112 ? cause : error;
}
