import { StowageError } from '@stowage/core';
import { socketErrorCode } from '@stowage/core/adapter';
import { BSON, type Document } from 'mongodb';

/**
 * Driver errors become `StowageError`s with the driver error as `cause`. Errors are recognised
 * by `name`, `code` and labels, never by `instanceof`: a client passed in may come from another
 * copy or major version of the `mongodb` package than the one stowage imports.
 */

interface DriverErrorShape {
  name?: unknown;
  code?: unknown;
  message?: unknown;
  writeErrors?: unknown;
  keyPattern?: unknown;
}

/** Server error codes that mean "the cluster cannot serve this right now". */
const UNAVAILABLE_CODES = new Set([
  6, // HostUnreachable
  7, // HostNotFound
  91, // ShutdownInProgress
  189, // PrimarySteppedDown
  10107, // NotWritablePrimary
  11600, // InterruptedAtShutdown
  11602, // InterruptedDueToReplStateChange
  13435, // NotPrimaryNoSecondaryOk
  13436, // NotPrimaryOrSecondary
  9001, // SocketException
  133, // FailedToSatisfyReadPreference: no member the read preference accepts is reachable
]);

/** Server error codes that mean "ran out of time". */
const TIMEOUT_CODES = new Set([
  50, // MaxTimeMSExpired
  89, // NetworkTimeout
  262, // ExceededTimeLimit
  202, // NetworkInterfaceExceededTimeLimit
  64, // WriteConcernFailed: the write concern (e.g. majority) was not satisfied within wtimeout
]);

/** Driver error names (drivers 6 and 7; some older spellings kept) that mean "cannot reach the cluster". */
const UNAVAILABLE_NAMES = new Set([
  'MongoServerSelectionError',
  'MongoNetworkError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoPoolClosedError',
  'MongoPoolClearedError',
  'PoolClearedError',
  'PoolClearedOnNetworkError',
]);

const TIMEOUT_NAMES = new Set([
  'MongoNetworkTimeoutError',
  'MongoOperationTimeoutError',
  'MongoWaitQueueTimeoutError',
  'WaitQueueTimeoutError',
]);

function shape(error: unknown): DriverErrorShape {
  return error !== null && typeof error === 'object' ? (error as DriverErrorShape) : {};
}

/** E11000: an insert or upsert hit a unique index. */
export function isDuplicateKeyError(error: unknown): boolean {
  const { code, writeErrors } = shape(error);
  if (code === 11000 || code === 11001) return true;
  // An ordered bulk write reports the first failure in writeErrors.
  return Array.isArray(writeErrors) && writeErrors.some((writeError) => shape(writeError).code === 11000);
}

/**
 * The key pattern of the unique index a duplicate-key error names (MongoDB reports it;
 * FerretDB 1.x does not: `undefined`).
 */
export function duplicateKeyPattern(error: unknown): Record<string, unknown> | undefined {
  const { keyPattern } = shape(error);
  return keyPattern !== null && typeof keyPattern === 'object' ? (keyPattern as Record<string, unknown>) : undefined;
}

/** The statements of a failed bulk write that failed, with their index in the batch. */
export function writeErrorsOf(error: unknown): { index: number; code: unknown }[] {
  const { writeErrors } = shape(error);
  if (writeErrors === undefined || writeErrors === null) return [];
  return (Array.isArray(writeErrors) ? writeErrors : [writeErrors]) as { index: number; code: unknown }[];
}

/** Turns a driver error into a `StowageError` where the meaning is clear; other errors pass unchanged. */
export function toStowageError(error: unknown): unknown {
  if (error instanceof StowageError) return error;
  const { name, code, message } = shape(error);
  const text = typeof message === 'string' ? message : String(error);
  if ((typeof name === 'string' && TIMEOUT_NAMES.has(name)) || (typeof code === 'number' && TIMEOUT_CODES.has(code))) {
    return new StowageError('E_TIMEOUT', `MongoDB operation timed out: ${text}`, { cause: error });
  }
  if ((typeof name === 'string' && UNAVAILABLE_NAMES.has(name)) || (typeof code === 'number' && UNAVAILABLE_CODES.has(code))) {
    return new StowageError('E_UNAVAILABLE', `MongoDB is unavailable: ${text}`, { cause: error });
  }
  // The driver sometimes passes a socket error on unwrapped (a write that fails while the
  // connection is being reset).
  const socketCode = socketErrorCode(error);
  if (socketCode !== undefined) {
    const problem = socketCode === 'E_TIMEOUT' ? 'operation timed out' : 'is unreachable';
    return new StowageError(socketCode, `MongoDB ${problem}: ${text}`, { cause: error });
  }
  // BadValue 2 "object to insert too large": an insert between 16 MiB and 16 MiB + 16 KiB
  // reaches the server (larger ones the driver refuses itself).
  if (code === 10334 || code === 17419 || /larger than the max(imum)? (document )?size|too large/i.test(text)) {
    return new StowageError('E_INVALID_VALUE', `the document would exceed MongoDB's size limit: ${text}`, { cause: error });
  }
  // The driver's BSON serializer has a fixed buffer of about 17 MiB: a larger document fails to
  // serialize with a RangeError before anything is sent.
  if (name === 'RangeError' && code === 'ERR_OUT_OF_RANGE' && /offset/.test(text)) {
    return new StowageError('E_INVALID_VALUE', `the document is too large to send to MongoDB (limit 16 MiB): ${text}`, { cause: error });
  }
  return error;
}

/**
 * Server error codes that say "this server does not understand that command, stage, operator,
 * variable or option": what a feature probe concludes "unsupported" from. Anything else
 * (network trouble, a failover, a timeout, an interruption, missing privileges) is not an
 * answer about the feature.
 */
const UNSUPPORTED_CODES = new Set([
  2, // BadValue (some MongoDB-compatible services, for an operator they lack)
  9, // FailedToParse (FerretDB: an array as update, `$documents`, unknown command fields)
  14, // TypeMismatch (FerretDB: an update pipeline; jongodb: any unsupported operator)
  20, // IllegalOperation (MongoDB standalone: transactions)
  59, // CommandNotFound
  72, // InvalidOptions
  115, // CommandNotSupported
  168, // InvalidPipelineOperator
  238, // NotImplemented
  303, // a feature Amazon DocumentDB does not support
  323, // APIStrictError: not part of the Stable API version the client asked for
  17276, // use of an undefined variable (`$$NOW` before MongoDB 4.2)
  31325, // unknown expression operator
  40324, // unrecognised pipeline stage
  40573, // `$changeStream` outside a replica set or sharded cluster
]);

/** True when the server answered that it does not implement a command, stage, operator or option. */
export function isUnsupportedError(error: unknown): boolean {
  const { code } = shape(error);
  return typeof code === 'number' && UNSUPPORTED_CODES.has(code);
}

/** Server error codes that are worth trying again: the same command may succeed in a moment. */
const TRANSIENT_CODES = new Set([
  24, // LockTimeout
  112, // WriteConflict
  11601, // Interrupted (e.g. killOp)
]);

/** True for errors that a moment later may not happen again: network, failover, timeouts, interruptions. */
export function isTransientError(error: unknown): boolean {
  const { name, code } = shape(error);
  if (typeof name === 'string' && (UNAVAILABLE_NAMES.has(name) || TIMEOUT_NAMES.has(name))) return true;
  return typeof code === 'number' && (UNAVAILABLE_CODES.has(code) || TIMEOUT_CODES.has(code) || TRANSIENT_CODES.has(code));
}

/**
 * Runs an upsert whose filter is only `_id` equality. Two such upserts of a new `_id` can both
 * try to insert; the loser's duplicate-key error only means the document now exists, so trying
 * again updates it. (MongoDB retries these itself; not every MongoDB-compatible server does.)
 */
export async function upsertById<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (!isDuplicateKeyError(error)) throw error;
    return operation();
  }
}

/** MongoDB's largest document (`maxBsonObjectSize`). */
export const MAX_DOCUMENT_BYTES = 16 * 1024 * 1024;

/**
 * `E_INVALID_VALUE` for a document MongoDB would refuse as too large. Inserts are checked
 * before they are sent: one a little over 16 MiB reaches the server, which answers with a
 * generic BadValue (and some MongoDB-compatible servers accept it).
 */
export function assertDocumentSize(document: Document, what: string): void {
  const size = BSON.calculateObjectSize(document);
  if (size > MAX_DOCUMENT_BYTES) {
    throw new StowageError('E_INVALID_VALUE', `${what} would be a ${size}-byte document; MongoDB's limit is ${MAX_DOCUMENT_BYTES} bytes (16 MiB)`);
  }
}
