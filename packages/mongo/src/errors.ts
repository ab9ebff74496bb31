import { socketErrorCode, StowageError } from '@stowage/core';

/**
 * Driver errors become `StowageError`s with the driver error as `cause`. Errors are recognised
 * by `name`, `code` and labels, never by `instanceof`: a client passed in may come from another
 * copy or major version of the `mongodb` package than the one stowage imports.
 */

interface DriverErrorShape {
  name?: unknown;
  code?: unknown;
  codeName?: unknown;
  message?: unknown;
  errorLabels?: unknown;
  errorLabelSet?: unknown;
  writeErrors?: unknown;
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
]);

/** Server error codes that mean "ran out of time". */
const TIMEOUT_CODES = new Set([
  50, // MaxTimeMSExpired
  89, // NetworkTimeout
  262, // ExceededTimeLimit
  202, // NetworkInterfaceExceededTimeLimit
]);

const UNAVAILABLE_NAMES = new Set([
  'MongoServerSelectionError',
  'MongoNetworkError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoPoolClosedError',
  'PoolClearedError',
  'PoolClearedOnNetworkError',
]);

const TIMEOUT_NAMES = new Set(['MongoNetworkTimeoutError', 'MongoOperationTimeoutError', 'WaitQueueTimeoutError']);

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

/** Turns a driver error into a `StowageError` where the meaning is clear; other errors pass unchanged. */
export function toStowageError(error: unknown): unknown {
  if (error instanceof StowageError) return error;
  const { name, code, message } = shape(error);
  const text = typeof message === 'string' ? message : String(error);
  if (typeof name === 'string' && TIMEOUT_NAMES.has(name)) {
    return new StowageError('E_TIMEOUT', `MongoDB operation timed out: ${text}`, { cause: error });
  }
  if (typeof code === 'number' && TIMEOUT_CODES.has(code)) {
    return new StowageError('E_TIMEOUT', `MongoDB operation timed out: ${text}`, { cause: error });
  }
  if (typeof name === 'string' && UNAVAILABLE_NAMES.has(name)) {
    return new StowageError('E_UNAVAILABLE', `MongoDB is unavailable: ${text}`, { cause: error });
  }
  if (typeof code === 'number' && UNAVAILABLE_CODES.has(code)) {
    return new StowageError('E_UNAVAILABLE', `MongoDB is unavailable: ${text}`, { cause: error });
  }
  // The driver sometimes passes a socket error on unwrapped (a write that fails while the
  // connection is being reset).
  const socketCode = socketErrorCode(error);
  if (socketCode !== undefined) {
    const problem = socketCode === 'E_TIMEOUT' ? 'operation timed out' : 'is unreachable';
    return new StowageError(socketCode, `MongoDB ${problem}: ${text}`, { cause: error });
  }
  if (code === 10334 || code === 17419 || /larger than the max(imum)? (document )?size/i.test(text)) {
    return new StowageError('E_INVALID_VALUE', `the document would exceed MongoDB's size limit: ${text}`, { cause: error });
  }
  return error;
}

/** True for errors that mean the server does not implement a command, option or operator. */
export function isUnsupportedError(error: unknown): boolean {
  const { name, code } = shape(error);
  if (typeof name === 'string' && (UNAVAILABLE_NAMES.has(name) || TIMEOUT_NAMES.has(name))) return false;
  // Anything the server itself answered with an error code counts: servers that lack a feature
  // answer with different codes (NotImplemented 238, CommandNotSupported 115, InvalidOptions 72,
  // TypeMismatch 14, FailedToParse 9, Location… codes), while network trouble has none.
  return typeof code === 'number' && !UNAVAILABLE_CODES.has(code) && !TIMEOUT_CODES.has(code);
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
