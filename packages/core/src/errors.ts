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
] as const;

export type StowageErrorCode = (typeof ERROR_CODES)[number];

/**
 * The one error class every stowage adapter throws. Branch on `code`, never on `message`.
 * When a driver error caused it, that error is kept as `cause`.
 */
export class StowageError extends Error {
  override readonly name = 'StowageError';
  readonly code: StowageErrorCode;

  constructor(code: StowageErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

export function isStowageError(error: unknown, code?: StowageErrorCode): error is StowageError {
  return error instanceof StowageError && (code === undefined || error.code === code);
}

export function closedError(what: string): StowageError {
  return new StowageError('E_CLOSED', `${what} is closed`);
}
