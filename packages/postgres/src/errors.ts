import { socketErrorCode, StowageError } from '@stowage/core';

/** SQLSTATE of a server error, if `error` is one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

export const UNIQUE_VIOLATION = '23505';

const UNAVAILABLE_SQLSTATES = new Set([
  '53300', // too_many_connections
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '3D000', // invalid_catalog_name (database does not exist)
  '28000', // invalid_authorization_specification
  '28P01', // invalid_password
]);

const TIMEOUT_SQLSTATES = new Set([
  '57014', // query_canceled: statement_timeout
  '55P03', // lock_not_available: lock_timeout
  '25P03', // idle_in_transaction_session_timeout
]);

/**
 * Maps a `pg` error to the stowage error a caller can act on:
 * connection problems are `E_UNAVAILABLE`, timeouts `E_TIMEOUT` (both retryable), a missing
 * table `E_UNAVAILABLE` with a hint. Anything else (a bug, a constraint the caller did not
 * expect) is returned unchanged. The driver error is always kept as `cause`.
 */
export function toStowageError(error: unknown): unknown {
  if (error instanceof StowageError) return error;
  const state = sqlState(error);
  const message = error instanceof Error ? error.message : String(error);
  if (state !== undefined) {
    if (state.startsWith('08') || UNAVAILABLE_SQLSTATES.has(state)) {
      return new StowageError('E_UNAVAILABLE', `PostgreSQL is unavailable: ${message}`, { cause: error });
    }
    if (TIMEOUT_SQLSTATES.has(state)) {
      return new StowageError('E_TIMEOUT', `PostgreSQL timed out: ${message}`, { cause: error });
    }
    if (state === '42P01' || state === '3F000') {
      return new StowageError(
        'E_UNAVAILABLE',
        `${message} (with autoCreate: false, create the tables first: see schemaSql())`,
        { cause: error },
      );
    }
    if (state === '42939') {
      return new StowageError('E_INVALID_OPTION', `PostgreSQL refused a name: ${message}`, { cause: error });
    }
    if (state === '22021') {
      return new StowageError('E_INVALID_VALUE', `PostgreSQL rejected the text: ${message}`, { cause: error });
    }
    return error;
  }
  const socketCode = socketErrorCode(error);
  if (socketCode !== undefined) {
    const problem = socketCode === 'E_TIMEOUT' ? 'timed out' : 'is unreachable';
    return new StowageError(socketCode, `PostgreSQL ${problem}: ${message}`, { cause: error });
  }
  if (/timeout/i.test(message)) {
    // pg: "Query read timeout", "Connection terminated due to connection timeout";
    // pg-pool: "timeout exceeded when trying to connect"
    return new StowageError('E_TIMEOUT', `PostgreSQL timed out: ${message}`, { cause: error });
  }
  if (/Connection terminated|Connection ended|Client was closed|Cannot use a pool after calling end|not queryable/i.test(message)) {
    return new StowageError('E_UNAVAILABLE', `PostgreSQL connection lost: ${message}`, { cause: error });
  }
  return error;
}
