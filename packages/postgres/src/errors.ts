import { StowageError, type StowageErrorCode } from '@stowage/core';
import { socketErrorCode } from '@stowage/core/adapter';

/** SQLSTATE of a server error, if `error` is one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

export const UNIQUE_VIOLATION = '23505';
export const LOCK_NOT_AVAILABLE = '55P03';
export const UNDEFINED_TABLE = '42P01';
export const UNDEFINED_SCHEMA = '3F000';
export const INSUFFICIENT_PRIVILEGE = '42501';
export const READ_ONLY_TRANSACTION = '25006';

/**
 * What a caller can do about an error decides its code:
 * - `E_UNAVAILABLE`, `E_TIMEOUT`: retry later, the same call can succeed (the server is down,
 *   restarting, full, read-only during a failover, or too slow right now);
 * - `E_INVALID_OPTION`: fix the configuration (credentials, database, TLS files and
 *   certificates, privileges, the tables' names and layout, pooler settings); retrying the same
 *   call fails the same way;
 * - `E_INVALID_KEY`, `E_INVALID_VALUE`: fix the input (a key too long for the index, text the
 *   server refused).
 */
const SQLSTATE_CODES: ReadonlyMap<string, StowageErrorCode> = new Map([
  ['53300', 'E_UNAVAILABLE'], // too_many_connections
  ['53000', 'E_UNAVAILABLE'], // insufficient_resources
  ['53100', 'E_UNAVAILABLE'], // disk_full
  ['53200', 'E_UNAVAILABLE'], // out_of_memory
  ['57P01', 'E_UNAVAILABLE'], // admin_shutdown
  ['57P02', 'E_UNAVAILABLE'], // crash_shutdown
  ['57P03', 'E_UNAVAILABLE'], // cannot_connect_now (starting up, or a standby not accepting connections)
  ['57P05', 'E_UNAVAILABLE'], // idle_session_timeout
  ['58030', 'E_UNAVAILABLE'], // io_error
  ['25006', 'E_UNAVAILABLE'], // read_only_sql_transaction: a standby, or a primary being failed over
  ['40001', 'E_UNAVAILABLE'], // serialization_failure
  ['40P01', 'E_UNAVAILABLE'], // deadlock_detected
  ['57014', 'E_TIMEOUT'], // query_canceled: statement_timeout
  ['55P03', 'E_TIMEOUT'], // lock_not_available: lock_timeout
  ['25P03', 'E_TIMEOUT'], // idle_in_transaction_session_timeout
]);

/** Errors that came out of the driver (a statement or a connection attempt), as opposed to the caller's own. */
const driverErrors = new WeakSet<object>();

/** Marks `error` as the driver's: {@link toStowageError} then always maps it. Returns it. */
export function driverError(error: unknown): unknown {
  if (typeof error === 'object' && error !== null && !(error instanceof StowageError)) driverErrors.add(error);
  return error;
}

/**
 * Maps an error a store's operation met to the `StowageError` a caller can act on (every
 * store's `toStowageError`; see {@link SQLSTATE_CODES} for what each code asks of the caller),
 * keeping the driver error as `cause`. Every error of the driver becomes one; an error of the
 * caller's own (a `getOrSet` loader's, an abort reason) passes unchanged.
 */
export function toStowageError(error: unknown): unknown {
  if (error instanceof StowageError) return error;
  const state = sqlState(error);
  const message = error instanceof Error ? error.message : String(error);
  const wrap = (code: StowageErrorCode, text: string) => new StowageError(code, text, { cause: error });
  if (state !== undefined) return serverError(state, message, wrap);

  const socketCode = socketErrorCode(error);
  if (socketCode !== undefined) return wrap(socketCode, `PostgreSQL ${socketCode === 'E_TIMEOUT' ? 'timed out' : 'is unreachable'}: ${message}`);
  const fromDriver = typeof error === 'object' && error !== null && driverErrors.has(error);
  if (!fromDriver) {
    // Not seen leaving the driver: only pg's own words about its connection are mapped.
    return CONNECTION_MESSAGES.test(message) ? wrap('E_UNAVAILABLE', `PostgreSQL connection lost: ${message}`) : error;
  }
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (TLS_ERROR.test(code) || FILE_ERRORS.has(code))) {
    // pg reads sslrootcert / sslcert / sslkey files named in the URL when it connects.
    return wrap('E_INVALID_OPTION', `the TLS settings of the connection cannot be used: ${message}`);
  }
  if (typeof code === 'string' && (code.startsWith('ERR_INVALID_ARG') || SETTING_ERRORS.has(code))) {
    return wrap('E_INVALID_OPTION', `the connection settings are invalid: ${message}`);
  }
  if (/does not support SSL|SASL|password must be a string/i.test(message)) {
    return wrap('E_INVALID_OPTION', `the connection settings do not fit the server: ${message}`);
  }
  if (/timeout/i.test(message)) {
    // pg: "Query read timeout", "Connection terminated due to connection timeout";
    // pg-pool: "timeout exceeded when trying to connect"
    return wrap('E_TIMEOUT', `PostgreSQL timed out: ${message}`);
  }
  // "Connection terminated", "Client was closed and is not queryable", "Cannot use a pool
  // after calling end on the pool", and whatever else the driver reports about its connection.
  return wrap('E_UNAVAILABLE', `PostgreSQL connection failed: ${message}`);
}

const CONNECTION_MESSAGES = /Connection terminated|Connection ended|Client was closed|Cannot use a pool after calling end|not queryable/i;

/**
 * Classes of SQLSTATE that a retry can get past: connection (08), resources (53), operator
 * intervention (57), object state (55), system (58) and internal (XX) errors.
 */
const UNAVAILABLE_CLASSES = new Set(['08', '53', '55', '57', '58', 'XX']);

/** Node's codes for certificate and TLS failures (`DEPTH_ZERO_SELF_SIGNED_CERT`, `ERR_TLS_CERT_ALTNAME_INVALID`, …). */
const TLS_ERROR = /CERT|SSL|TLS|UNABLE_TO_(GET|VERIFY|DECRYPT)/;
const FILE_ERRORS = new Set(['ENOENT', 'EACCES', 'EISDIR', 'EPERM']);
/**
 * Node's codes for settings pg meets only when it connects (stowage checks the options it is
 * given, but not a `pg.Pool` of yours nor `PGPORT`): a port out of range, a URL it cannot read.
 */
const SETTING_ERRORS = new Set(['ERR_SOCKET_BAD_PORT', 'ERR_INVALID_URL']);

function serverError(state: string, message: string, wrap: (code: StowageErrorCode, text: string) => StowageError): StowageError {
  if (state === '08P01' && /unsupported startup parameter/i.test(message)) {
    // PgBouncer refuses startup parameters it does not know (statement_timeout, …). Listing one
    // in its ignore_startup_parameters is no fix: PgBouncer then drops the setting silently.
    return wrap(
      'E_INVALID_OPTION',
      `the pooler refused a connection setting: ${message} (set it per role or database instead, e.g. ALTER ROLE … SET statement_timeout = '5s')`,
    );
  }
  if (state === '08P01' && /no such (database|user)|authentication failed/i.test(message)) {
    // PgBouncer answers a wrong database or credentials with its own 08P01: no retry fixes it.
    return wrap('E_INVALID_OPTION', `the pooler refused the connection settings: ${message}`);
  }
  const mapped = SQLSTATE_CODES.get(state);
  if (mapped === 'E_TIMEOUT') return wrap(mapped, `PostgreSQL timed out: ${message}`);
  if (mapped !== undefined || UNAVAILABLE_CLASSES.has(state.slice(0, 2))) {
    const why = state === READ_ONLY_TRANSACTION ? ' (the server is read-only: a standby, or a primary being failed over)' : '';
    return wrap('E_UNAVAILABLE', `PostgreSQL is unavailable: ${message}${why}`);
  }
  if (state === '25P02') {
    // in_failed_sql_transaction: a store's view ran in a transaction an earlier statement broke.
    return wrap('E_INVALID_OPTION', `${message} (an earlier statement of the transaction failed: roll it back)`);
  }
  if (state === '28000' || state === '28P01') return wrap('E_INVALID_OPTION', `PostgreSQL refused the credentials: ${message}`);
  if (state === '3D000') return wrap('E_INVALID_OPTION', `the database does not exist: ${message}`);
  if (state === INSUFFICIENT_PRIVILEGE) {
    return wrap('E_INVALID_OPTION', `${message} (the role lacks a privilege the store needs: see grantsSql() for what each store needs)`);
  }
  if (state === UNDEFINED_TABLE || state === UNDEFINED_SCHEMA) {
    return wrap('E_INVALID_OPTION', `${message} (the table is missing: create it with schemaSql(), or let the store create it with autoCreate)`);
  }
  if (state === '42703') {
    // CREATE TABLE IF NOT EXISTS leaves a table of another layout as it is.
    return wrap('E_INVALID_OPTION', `${message} (the table exists with another layout than schemaSql() describes: a table of awaitly-postgres is upgraded by a store with autoCreate, any other needs a new table)`);
  }
  if (state === '2BP01') {
    // dependent_objects_still_exist: a view or foreign key of yours rests on what the statement changes.
    return wrap('E_INVALID_OPTION', `${message} (objects of yours depend on the table: see the README on adopting tables)`);
  }
  if (state === '42809') {
    return wrap('E_INVALID_OPTION', `${message} (the name is taken by an object that is not a table of this layout: choose another table name)`);
  }
  if (state === '54000' && /index row/i.test(message)) {
    return wrap('E_INVALID_KEY', `the key is too long for the table's index (with its prefix, and U+0000/U+0001 stored as two characters): ${message}`);
  }
  if (state.startsWith('42') || state.startsWith('0A') || state.startsWith('F0')) {
    return wrap('E_INVALID_OPTION', `PostgreSQL refused the statement: ${message}`);
  }
  // Data exceptions (22), constraint or trigger refusals (23, P0) and program limits (54):
  // the value cannot be stored as it is.
  return wrap('E_INVALID_VALUE', `PostgreSQL refused the value: ${message}`);
}
