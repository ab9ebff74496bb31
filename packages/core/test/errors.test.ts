import { describe, expect, it } from 'vitest';
import { ERROR_CODES, StowageError, closedError, isStowageError, socketErrorCode } from '../src/errors.js';
import { Lifecycle } from '../src/lifecycle.js';

describe('StowageError', () => {
  it('has a stable name, code and optional cause', () => {
    const cause = new Error('driver said no');
    const error = new StowageError('E_UNAVAILABLE', 'database unreachable', { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('StowageError');
    expect(error.code).toBe('E_UNAVAILABLE');
    expect(error.cause).toBe(cause);
    expect(isStowageError(error)).toBe(true);
    expect(isStowageError(error, 'E_UNAVAILABLE')).toBe(true);
    expect(isStowageError(error, 'E_CLOSED')).toBe(false);
    expect(isStowageError(cause)).toBe(false);
  });

  it('the code list is the documented one, in order (codes are only ever added)', () => {
    expect(ERROR_CODES).toEqual([
      'E_CLOSED',
      'E_INVALID_KEY',
      'E_INVALID_VALUE',
      'E_INVALID_OPTION',
      'E_VERSION_CONFLICT',
      'E_LOCK_NOT_OWNED',
      'E_LOCK_LOST',
      'E_UNAVAILABLE',
      'E_TIMEOUT',
      'E_LOCK_BUSY',
    ]);
    expect(closedError('thing')).toMatchObject({ code: 'E_CLOSED', message: 'thing is closed' });
  });
});

describe('Lifecycle', () => {
  it('runs release once, returns the same promise, and throws E_CLOSED afterwards', async () => {
    let released = 0;
    const lifecycle = new Lifecycle('store');
    expect(() => lifecycle.assertOpen()).not.toThrow();
    const first = lifecycle.close(async () => void released++);
    const second = lifecycle.close(async () => void released++);
    expect(second).toBe(first);
    await first;
    expect(released).toBe(1);
    expect(lifecycle.isClosed).toBe(true);
    expect(() => lifecycle.assertOpen()).toThrow(expect.objectContaining({ code: 'E_CLOSED' }));
  });
});

describe('socketErrorCode', () => {
  const socketError = (code: unknown) => Object.assign(new Error(`write ${String(code)}`), { code, syscall: 'write' });

  it('maps raw socket errors a driver passed on to E_UNAVAILABLE or E_TIMEOUT, and nothing else', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH']) expect(socketErrorCode(socketError(code)), code).toBe('E_UNAVAILABLE');
    expect(socketErrorCode(socketError('ETIMEDOUT'))).toBe('E_TIMEOUT');
    for (const other of [socketError('ENOENT'), socketError(11000), new Error('no code'), null, 'ECONNRESET']) expect(socketErrorCode(other)).toBeUndefined();
  });
});
