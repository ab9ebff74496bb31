import { StowageError } from '@stowage/core';
import { describe, expect, it } from 'vitest';
import { isDuplicateKeyError, isUnsupportedError, toStowageError } from '../src/errors.js';

/** Error shapes as the driver builds them (matched by name and code, never by class: see errors.ts). */
const driverError = (name: string, fields: Record<string, unknown> = {}) =>
  Object.assign(new Error(`${name} happened`), { name, ...fields });

describe('driver errors become StowageErrors with the driver error as cause', () => {
  it.each([
    ['MongoServerSelectionError', {}, 'E_UNAVAILABLE'],
    ['MongoNetworkError', {}, 'E_UNAVAILABLE'],
    ['MongoTopologyClosedError', {}, 'E_UNAVAILABLE'],
    ['MongoNotConnectedError', {}, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 10107, codeName: 'NotWritablePrimary' }, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 91, codeName: 'ShutdownInProgress' }, 'E_UNAVAILABLE'],
    ['MongoNetworkTimeoutError', {}, 'E_TIMEOUT'],
    ['MongoOperationTimeoutError', {}, 'E_TIMEOUT'],
    ['MongoServerError', { code: 50, codeName: 'MaxTimeMSExpired' }, 'E_TIMEOUT'],
    ['MongoServerError', { code: 262, codeName: 'ExceededTimeLimit' }, 'E_TIMEOUT'],
    ['MongoServerError', { code: 10334, codeName: 'BSONObjectTooLarge' }, 'E_INVALID_VALUE'],
    // A socket error the driver passes on unwrapped (seen when a proxy resets the connection).
    ['Error', { code: 'ECONNRESET', syscall: 'write' }, 'E_UNAVAILABLE'],
    ['Error', { code: 'EPIPE' }, 'E_UNAVAILABLE'],
    ['Error', { code: 'ETIMEDOUT' }, 'E_TIMEOUT'],
  ] as const)('%s %o -> %s', (name, fields, code) => {
    const cause = driverError(name, fields);
    const mapped = toStowageError(cause);
    expect(mapped).toBeInstanceOf(StowageError);
    expect(mapped).toMatchObject({ code, cause });
  });

  it('leaves other errors unchanged, and StowageErrors as they are', () => {
    const other = driverError('MongoServerError', { code: 13, codeName: 'Unauthorized' });
    expect(toStowageError(other)).toBe(other);
    const stowage = new StowageError('E_CLOSED', 'closed');
    expect(toStowageError(stowage)).toBe(stowage);
    expect(toStowageError('a string')).toBe('a string');
  });

  it('recognises duplicate keys (also inside bulk write errors) and server refusals', () => {
    expect(isDuplicateKeyError(driverError('MongoServerError', { code: 11000 }))).toBe(true);
    expect(isDuplicateKeyError(driverError('MongoBulkWriteError', { code: 65, writeErrors: [{ code: 11000, index: 2 }] }))).toBe(true);
    expect(isDuplicateKeyError(driverError('MongoServerError', { code: 2 }))).toBe(false);
    expect(isUnsupportedError(driverError('MongoServerError', { code: 238, codeName: 'NotImplemented' }))).toBe(true);
    expect(isUnsupportedError(driverError('MongoServerError', { code: 14, codeName: 'TypeMismatch' }))).toBe(true);
    // Network trouble is not "unsupported": detection must not fall back to the classic dialect on it.
    expect(isUnsupportedError(driverError('MongoNetworkError'))).toBe(false);
    expect(isUnsupportedError(driverError('MongoServerError', { code: 91 }))).toBe(false);
  });
});
