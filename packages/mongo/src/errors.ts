import { StowageError, type StowageErrorCode } from '@stowage/core';
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
  // A cursor lost under a listing, mostly by a failover or a restart: the listing run again succeeds.
  43, // CursorNotFound
  175, // QueryPlanKilled
  237, // CursorKilled
]);

/** Server error codes that mean "ran out of time". */
const TIMEOUT_CODES = new Set([
  50, // MaxTimeMSExpired
  89, // NetworkTimeout
  262, // ExceededTimeLimit
  202, // NetworkInterfaceExceededTimeLimit
  64, // WriteConcernFailed: the write concern (e.g. majority) was not satisfied within wtimeout
  24, // LockTimeout: the server waited too long for a lock
]);

/** Driver error names (drivers 6 and 7; some older spellings kept) that mean "cannot reach the cluster". */
const UNAVAILABLE_NAMES = new Set([
  'MongoServerSelectionError',
  'MongoNetworkError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoClientClosedError',
  'MongoServerClosedError',
  'MongoStalePrimaryError',
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

/**
 * Which statements of a failed unordered bulk write of `count` upserts or inserts to run again
 * one by one, because the write met a duplicate `_id` (an upsert that lost an insert race, or
 * whose filter did not match the document that is there; an insert of a document that exists):
 * the ones the error lists when the server accounted for every statement (MongoDB: each
 * matched, upserted, inserted or failed), else all of them. jongodb reports the duplicate for
 * the command as a whole, without writeErrors, and may skip the statements after it; FerretDB
 * 1.x stops at the first one and reports it at index 0, with no counts. `null` when anything
 * else failed.
 */
export function statementsToRetry(error: unknown, count: number): number[] | null {
  if (!isDuplicateKeyError(error)) return null;
  const failed = writeErrorsOf(error);
  if (failed.some((writeError) => writeError.code !== 11000)) return null;
  const result = (error as { result?: { matchedCount?: unknown; upsertedCount?: unknown; insertedCount?: unknown } }).result;
  const accounted = Number(result?.matchedCount ?? 0) + Number(result?.upsertedCount ?? 0) + Number(result?.insertedCount ?? 0) + failed.length;
  return accounted === count ? failed.map(({ index }) => index) : Array.from({ length: count }, (_, index) => index);
}

/**
 * Maps an error a store's operation met to the `StowageError` a caller can act on, with the
 * driver error as `cause`. What the caller can do decides the code (as in `@stowage/postgres`):
 *
 * - `E_UNAVAILABLE`, `E_TIMEOUT`: retry later, the same call can succeed (no server reachable, a
 *   failover, a dropped connection, a conflict the server labels retryable, too slow right now);
 * - `E_INVALID_OPTION`: fix the configuration (credentials, TLS files and certificates, the
 *   database, privileges, the collections and their indexes); retrying fails the same way;
 * - `E_INVALID_VALUE`, `E_INVALID_KEY`: fix the input (a document over 16 MiB).
 *
 * Every error of the driver (recognised by name, code and labels: see the top of this file)
 * becomes one; anything else (the caller's own errors) passes unchanged.
 */
export function toStowageError(error: unknown): unknown {
  if (error instanceof StowageError) return error;
  const { name, code, message } = shape(error);
  const text = typeof message === 'string' ? message : String(error);
  const wrap = (stowageCode: StowageErrorCode, what: string) => new StowageError(stowageCode, `${what}: ${text}`, { cause: error });

  // First: a network or server-selection error can be a configuration problem in disguise (its
  // cause says so), and the driver labels such errors retryable all the same.
  const configuration = configurationProblem(error);
  if (configuration !== undefined) return wrap('E_INVALID_OPTION', configuration);
  if (isNamed(name, TIMEOUT_NAMES) || (typeof code === 'number' && TIMEOUT_CODES.has(code))) return wrap('E_TIMEOUT', 'MongoDB operation timed out');
  if (isRetryable(error)) return wrap('E_UNAVAILABLE', 'MongoDB is unavailable');
  // The driver sometimes passes a socket error on unwrapped (a write that fails while the
  // connection is being reset).
  const socketCode = socketErrorCode(error);
  if (socketCode !== undefined) return wrap(socketCode, socketCode === 'E_TIMEOUT' ? 'MongoDB operation timed out' : 'MongoDB is unreachable');
  // BadValue 2 "object to insert too large": an insert between 16 MiB and 16 MiB + 16 KiB
  // reaches the server (larger ones the driver refuses itself).
  if (code === 10334 || code === 17419 || /larger than the max(imum)? (document )?size|too large/i.test(text)) {
    return wrap('E_INVALID_VALUE', "the document would exceed MongoDB's size limit");
  }
  // The driver's BSON serializer has a fixed buffer of about 17 MiB: a larger document fails to
  // serialize with a RangeError before anything is sent.
  if (name === 'RangeError' && code === 'ERR_OUT_OF_RANGE' && /offset/.test(text)) {
    return wrap('E_INVALID_VALUE', 'the document is too large to send to MongoDB (limit 16 MiB)');
  }
  if (!isDriverError(error)) return error;
  if (code === 17280) return wrap('E_INVALID_KEY', "the key is too long for the server's index (KeyTooLong)");
  // Any other answer of the server: not labelled retryable, so the same command fails the same
  // way (an index or validator of the collection, a missing privilege, a command the server or
  // its Stable API refuses). Stowage checks keys and values before it sends them, so what is
  // left to fix is the set-up.
  if (typeof code === 'number') return wrap('E_INVALID_OPTION', 'MongoDB refused the command');
  if (isNamed(name, MISUSE_NAMES)) return wrap('E_INVALID_OPTION', 'the MongoDB driver refused the settings or the call');
  // Anything else the driver reports (an unexpected response, a decompression failure…).
  return wrap('E_UNAVAILABLE', 'the MongoDB driver failed');
}

/** Server error codes that mean "these credentials or this user cannot do that": fix the configuration. */
const ACCESS_CODES = new Set([
  11, // UserNotFound
  13, // Unauthorized: the user lacks a privilege the command needs
  18, // AuthenticationFailed
]);

/** Labels the server or the driver puts on an error that the same command may not meet again. */
const RETRY_LABELS = ['RetryableWriteError', 'TransientTransactionError', 'RetryableError', 'SystemOverloadedError'];

/**
 * A network error, a timeout, or a server answer a retry can get past: unavailable (a
 * failover, a shutdown), a transient conflict, or labelled retryable.
 */
function isRetryable(error: unknown): boolean {
  return isTransientError(error) || RETRY_LABELS.some((label) => hasLabel(error, label));
}

/** Node's codes for certificate and TLS failures (`DEPTH_ZERO_SELF_SIGNED_CERT`, `ERR_TLS_CERT_ALTNAME_INVALID`, …). */
const TLS_ERROR = /CERT|SSL|TLS|UNABLE_TO_(GET|VERIFY|DECRYPT)/;
/** Node's codes for a file that cannot be read (the driver reads `tlsCAFile`, `tlsCertificateKeyFile`, `tlsCRLFile` when it connects). */
const FILE_ERRORS = new Set(['ENOENT', 'EACCES', 'EISDIR', 'EPERM']);

/**
 * What is wrong with the configuration, when `error` or one of its causes says so: the server
 * refused the connection handshake (credentials, authentication mechanism), a certificate or
 * TLS setting failed, or a file the connection settings name cannot be read. A pool cleared
 * "because another operation failed" and a server selection that timed out carry the error
 * behind them as `cause`.
 */
function configurationProblem(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current !== null && typeof current === 'object'; depth++, current = (current as { cause?: unknown }).cause) {
    const { code, syscall, path } = current as DriverErrorShape & { syscall?: unknown; path?: unknown };
    if (typeof code === 'number' && ACCESS_CODES.has(code) && isDriverError(current)) return 'MongoDB refused the credentials or the user lacks a privilege';
    // Any other refusal of the handshake (jongodb answers SASL with CommandNotFound): not a
    // network error, nor the server shutting down, stepping down or overloaded.
    if (hasLabel(current, 'HandshakeError') && !isRetryable(current)) return 'MongoDB refused the connection handshake (credentials, authentication mechanism)';
    if (typeof code === 'string' && TLS_ERROR.test(code)) return 'the TLS settings of the connection cannot be used';
    if (typeof code === 'string' && FILE_ERRORS.has(code) && (typeof path === 'string' || syscall === 'read' || syscall === 'open')) {
      return 'a file the connection settings name cannot be read (tlsCAFile, tlsCertificateKeyFile, tlsCRLFile)';
    }
  }
  return undefined;
}

/**
 * Driver errors that report a mistake in the settings or in how the driver was called (the
 * driver's `MongoAPIError` family and its parse errors), not a problem of the moment.
 */
const MISUSE_NAMES = new Set([
  'MongoAPIError',
  'MongoInvalidArgumentError',
  'MongoParseError',
  'MongoCompatibilityError',
  'MongoMissingCredentialsError',
  'MongoMissingDependencyError',
  'MongoExpiredSessionError',
  'MongoTransactionError',
  'MongoBatchReExecutionError',
  'MongoCursorInUseError',
  'MongoCursorExhaustedError',
  'MongoTailableCursorError',
  'BSONVersionError', // a BSON value from another major version of the bson package
]);

/** An error of the driver or its BSON library (any copy or version): by name, or by the driver's error labels. */
function isDriverError(error: unknown): boolean {
  const { name } = shape(error);
  if (typeof name === 'string' && (/^(Mongo|BSON)\w*Error$/.test(name) || UNAVAILABLE_NAMES.has(name) || TIMEOUT_NAMES.has(name))) return true;
  return typeof (error as { hasErrorLabel?: unknown } | null)?.hasErrorLabel === 'function';
}

function isNamed(name: unknown, names: ReadonlySet<string>): boolean {
  return typeof name === 'string' && names.has(name);
}

/** True when the driver error carries `label` (`hasErrorLabel`, or the `errorLabels` list of a plain shape). */
export function hasLabel(error: unknown, label: string): boolean {
  const { hasErrorLabel, errorLabels } = shape(error) as { hasErrorLabel?: unknown; errorLabels?: unknown };
  if (typeof hasErrorLabel === 'function') return (hasErrorLabel as (label: string) => boolean).call(error, label) === true;
  return Array.isArray(errorLabels) && errorLabels.includes(label);
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

/**
 * True when the server answered that it does not implement a command, stage, operator or
 * option (not when it refused to authenticate a connection: jongodb answers SASL with
 * CommandNotFound).
 */
export function isUnsupportedError(error: unknown): boolean {
  const { code } = shape(error);
  return typeof code === 'number' && UNSUPPORTED_CODES.has(code) && !hasLabel(error, 'HandshakeError');
}

/** Server error codes that are worth trying again: the same command may succeed in a moment. */
const TRANSIENT_CODES = new Set([
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
