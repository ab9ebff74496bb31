/** Stable error codes. They are part of the public API: never renamed, only added. */
export const ERROR_CODES = [
  'E_CLOSED',
  'E_INVALID_KEY',
  'E_INVALID_VALUE',
  'E_INVALID_OPTION',
  'E_VERSION_CONFLICT',
  'E_LOCK_NOT_OWNED',
  'E_LOCK_LOST',
  'E_UNAVAILABLE',
  'E_TIMEOUT',
  /** `withLock` did not get the lock within `wait` (default 0): another owner holds it. Not a database fault. */
  'E_LOCK_BUSY',
] as const;

export type StowageErrorCode = (typeof ERROR_CODES)[number];

/**
 * What marks a StowageError, in the global symbol registry: one key for every build (ESM and
 * CommonJS) and every copy of `@stowage/core` in a process. A CommonJS library beside an ESM
 * application, or two versions of core after version drift, each load their own class; an
 * error of one must still be a StowageError to the other, or retry logic keyed on a code breaks.
 */
const BRAND = Symbol.for('@stowage/core:StowageError');

/**
 * The one error class every stowage adapter throws. Branch on `code`, never on `message`.
 * When a driver error caused it, that error is kept as `cause`.
 *
 * `instanceof StowageError` and `isStowageError` test the brand, not the prototype chain, so they
 * answer the same for an error created by any build or copy of `@stowage/core`.
 */
export class StowageError extends Error {
  override readonly name = 'StowageError';
  readonly code: StowageErrorCode;

  constructor(code: StowageErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;
  }
}
// On the prototype, not on each error: nothing extra to print or serialize.
Object.defineProperty(StowageError.prototype, BRAND, { value: true });

export function isStowageError(error: unknown, code?: StowageErrorCode): error is StowageError {
  return error instanceof StowageError && (code === undefined || error.code === code);
}

export function closedError(what: string): StowageError {
  return new StowageError('E_CLOSED', `${what} is closed`);
}

/** Node socket error codes that mean the database cannot be reached right now. */
const UNREACHABLE_SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EPIPE',
  'EAI_AGAIN',
]);

/**
 * The stowage code for a raw Node socket error (`code` such as `ECONNRESET` or `ETIMEDOUT`)
 * that a driver passed on without wrapping, or `undefined` for any other error.
 */
export function socketErrorCode(error: unknown): 'E_UNAVAILABLE' | 'E_TIMEOUT' | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'ETIMEDOUT') return 'E_TIMEOUT';
  return typeof code === 'string' && UNREACHABLE_SOCKET_CODES.has(code) ? 'E_UNAVAILABLE' : undefined;
}
