import { StowageError } from '@stowage/core';
import { describe, expect, it } from 'vitest';
import { probe } from '../src/dialects/detect.js';
import { isDuplicateKeyError, isTransientError, isUnsupportedError, toStowageError, statementsToRetry } from '../src/errors.js';

/** Error shapes as the driver builds them (matched by name and code, never by class: see errors.ts). */
const driverError = (name: string, fields: Record<string, unknown> = {}) =>
  Object.assign(new Error(`${name} happened`), { name, ...fields });

describe('driver errors become StowageErrors with the driver error as cause', () => {
  it.each([
    ['MongoServerSelectionError', {}, 'E_UNAVAILABLE'],
    ['MongoNetworkError', {}, 'E_UNAVAILABLE'],
    ['MongoTopologyClosedError', {}, 'E_UNAVAILABLE'],
    ['MongoNotConnectedError', {}, 'E_UNAVAILABLE'],
    ['MongoPoolClearedError', {}, 'E_UNAVAILABLE'],
    ['MongoPoolClosedError', {}, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 10107, codeName: 'NotWritablePrimary' }, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 91, codeName: 'ShutdownInProgress' }, 'E_UNAVAILABLE'],
    ['MongoNetworkTimeoutError', {}, 'E_TIMEOUT'],
    ['MongoOperationTimeoutError', {}, 'E_TIMEOUT'],
    ['MongoWaitQueueTimeoutError', {}, 'E_TIMEOUT'],
    ['MongoServerError', { code: 50, codeName: 'MaxTimeMSExpired' }, 'E_TIMEOUT'],
    ['MongoServerError', { code: 262, codeName: 'ExceededTimeLimit' }, 'E_TIMEOUT'],
    ['MongoServerError', { code: 10334, codeName: 'BSONObjectTooLarge' }, 'E_INVALID_VALUE'],
    // A write concern (majority) not satisfied within wtimeout.
    ['MongoWriteConcernError', { code: 64, codeName: 'WriteConcernFailed' }, 'E_TIMEOUT'],
    ['MongoServerError', { code: 133, codeName: 'FailedToSatisfyReadPreference' }, 'E_UNAVAILABLE'],
    // A cursor lost under a listing by a failover or restart: the listing run again succeeds.
    ['MongoServerError', { code: 43, codeName: 'CursorNotFound' }, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 237, codeName: 'CursorKilled' }, 'E_UNAVAILABLE'],
    ['MongoServerError', { code: 175, codeName: 'QueryPlanKilled' }, 'E_UNAVAILABLE'],
    // An insert a little over 16 MiB reaches the server, which answers with a generic BadValue.
    ['MongoServerError', { code: 2, codeName: 'BadValue', message: 'object to insert too large. size in bytes: 16778240, max size: 16777216' }, 'E_INVALID_VALUE'],
    // A document over ~17 MiB: the driver's BSON serializer fails before sending anything.
    ['RangeError', { code: 'ERR_OUT_OF_RANGE', message: 'The value of "offset" is out of range. It must be >= 0 && <= 17825792. Received 17825794' }, 'E_INVALID_VALUE'],
    // A socket error the driver passes on unwrapped (seen when a proxy resets the connection).
    ['Error', { code: 'ECONNRESET', syscall: 'write' }, 'E_UNAVAILABLE'],
    ['Error', { code: 'EPIPE' }, 'E_UNAVAILABLE'],
    ['Error', { code: 'ETIMEDOUT' }, 'E_TIMEOUT'],
  ] as const)('%s %o -> %s', (name, fields, code) => {
    const cause = Object.assign(driverError(name), fields);
    const mapped = toStowageError(cause);
    expect(mapped).toBeInstanceOf(StowageError);
    expect(mapped).toMatchObject({ code, cause });
  });

  it('configuration problems are E_INVALID_OPTION, also behind a cleared pool or a server selection, though the driver labels them retryable', () => {
    const handshake = (code: number, codeName: string) => driverError('MongoServerError', { code, codeName, errorLabels: ['HandshakeError', 'ResetPool'] });
    const refusals = [
      driverError('MongoServerError', { code: 18, codeName: 'AuthenticationFailed' }),
      driverError('MongoServerError', { code: 13, codeName: 'Unauthorized' }),
      // jongodb answers SASL with CommandNotFound: a refusal of the handshake all the same.
      handshake(59, 'CommandNotFound'),
      // What the next operation on the pool gets (the driver's PoolClearedError, with the auth error as cause).
      driverError('MongoPoolClearedError', { cause: handshake(18, 'AuthenticationFailed'), errorLabels: ['PoolRequestedRetry'] }),
      // A missing tlsCAFile: fs.readFile's error, unwrapped, when the client connects.
      Object.assign(new Error("ENOENT: no such file or directory, open '/x/ca.pem'"), { code: 'ENOENT', errno: -2, syscall: 'open', path: '/x/ca.pem' }),
      // A server certificate the client does not trust, as the driver reports it (a server selection whose cause's cause is the TLS error).
      driverError('MongoServerSelectionError', {
        cause: driverError('MongoNetworkError', { errorLabels: ['SystemOverloadedError', 'RetryableError', 'ResetPool'], cause: Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }) }),
      }),
      driverError('MongoServerError', { code: 85, codeName: 'IndexOptionsConflict' }),
      driverError('MongoServerError', { code: 86, codeName: 'IndexKeySpecsConflict' }),
      driverError('MongoServerError', { code: 73, codeName: 'InvalidNamespace' }),
      driverError('MongoServerError', { code: 121, codeName: 'DocumentValidationFailure' }), // a validator on the collection
      driverError('MongoInvalidArgumentError'),
      driverError('MongoParseError'),
    ];
    for (const cause of refusals) {
      expect(toStowageError(cause), `${cause.name} ${String((cause as { code?: unknown }).code)}`).toMatchObject({ name: 'StowageError', code: 'E_INVALID_OPTION', cause });
    }
  });

  it('what a retry can get past is E_UNAVAILABLE: a pool cleared by a network error, labelled conflicts, other driver failures', () => {
    const retryable = [
      driverError('MongoPoolClearedError', { cause: driverError('MongoNetworkError', { errorLabels: ['HandshakeError'] }) }),
      driverError('MongoServerError', { code: 112, codeName: 'WriteConflict', errorLabels: ['TransientTransactionError'] }),
      driverError('MongoServerError', { code: 112, codeName: 'WriteConflict' }),
      driverError('MongoServerError', { code: 251, codeName: 'NoSuchTransaction', errorLabels: ['TransientTransactionError'] }),
      driverError('MongoServerError', { code: 462, codeName: 'IngressRequestRateLimitExceeded', errorLabels: ['SystemOverloadedError', 'RetryableError'] }),
      // The server shutting down while a connection authenticates is not a credentials problem.
      driverError('MongoServerError', { code: 91, codeName: 'ShutdownInProgress', errorLabels: ['HandshakeError'] }),
      driverError('MongoNetworkError', { errorLabels: ['HandshakeError'] }),
      driverError('MongoUnexpectedServerResponseError'),
    ];
    for (const cause of retryable) {
      expect(toStowageError(cause), `${cause.name} ${String((cause as { code?: unknown }).code)}`).toMatchObject({ name: 'StowageError', code: 'E_UNAVAILABLE', cause });
    }
  });

  it('leaves errors that are not the driver\'s unchanged, and StowageErrors as they are', () => {
    const stowage = new StowageError('E_CLOSED', 'closed');
    expect(toStowageError(stowage)).toBe(stowage);
    expect(toStowageError('a string')).toBe('a string');
    for (const error of [new Error('card declined'), new TypeError('x is not a function'), Object.assign(new Error('mine'), { code: 42 })]) {
      expect(toStowageError(error)).toBe(error);
    }
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

  it('a bulk of upserts that met a duplicate key runs again the statements that failed, or all of them where the server does not say which', () => {
    const bulkError = (writeErrors: unknown[], matchedCount: number, upsertedCount: number, code = 11000) =>
      driverError('MongoBulkWriteError', { code, writeErrors, result: { matchedCount, upsertedCount } });
    // MongoDB: every statement matched, upserted or failed.
    expect(statementsToRetry(bulkError([{ code: 11000, index: 2 }], 1, 2), 4)).toEqual([2]);
    // jongodb: the duplicate for the whole command, no writeErrors, some statements applied.
    expect(statementsToRetry(bulkError([], 0, 0), 3)).toEqual([0, 1, 2]);
    // FerretDB 1.x: stops at the first duplicate and reports it at index 0, without counts.
    expect(statementsToRetry(bulkError([{ code: 11000, index: 0 }], 0, 0), 3)).toEqual([0, 1, 2]);
    expect(statementsToRetry(bulkError([{ code: 11000, index: 0 }], 0, 0), 1)).toEqual([0]);
    // Anything else is the caller's to throw.
    expect(statementsToRetry(bulkError([{ code: 11000, index: 0 }, { code: 121, index: 1 }], 0, 0), 2)).toBeNull();
    expect(statementsToRetry(driverError('MongoServerError', { code: 2 }), 2)).toBeNull();
  });
});

describe('feature probes: only "not supported" answers mean unsupported', () => {
  const serverError = (code: number, codeName: string) => driverError('MongoServerError', { code, codeName });

  it('transient and permission errors are not "unsupported"; unknown command, stage, operator and API-strict answers are', () => {
    for (const [code, codeName] of [[64, 'WriteConcernFailed'], [133, 'FailedToSatisfyReadPreference'], [11601, 'Interrupted'], [24, 'LockTimeout'], [13, 'Unauthorized'], [91, 'ShutdownInProgress'], [189, 'PrimarySteppedDown']] as const) {
      expect(isUnsupportedError(serverError(code, codeName)), codeName).toBe(false);
    }
    for (const [code, codeName] of [[238, 'NotImplemented'], [59, 'CommandNotFound'], [115, 'CommandNotSupported'], [14, 'TypeMismatch'], [9, 'FailedToParse'], [40324, 'Location40324'], [168, 'InvalidPipelineOperator'], [323, 'APIStrictError'], [40573, 'Location40573'], [20, 'IllegalOperation']] as const) {
      expect(isUnsupportedError(serverError(code, codeName)), codeName).toBe(true);
    }
    expect(isTransientError(serverError(11601, 'Interrupted'))).toBe(true);
    expect(isTransientError(driverError('MongoNetworkError'))).toBe(true);
    expect(isTransientError(serverError(13, 'Unauthorized'))).toBe(false);
  });

  it('a probe retries transient errors, answers false for "unsupported", and fails on anything else', async () => {
    let calls = 0;
    const flaky = (error: Error, failures: number) => async () => {
      if (calls++ < failures) throw error;
    };
    expect(await probe(flaky(serverError(11601, 'Interrupted'), 1))).toBe(true); // killOp once: tried again, supported
    calls = 0;
    expect(await probe(flaky(driverError('MongoNetworkError'), 2))).toBe(true);
    calls = 0;
    await expect(probe(flaky(serverError(133, 'FailedToSatisfyReadPreference'), 3))).rejects.toMatchObject({ code: 133 }); // still failing: detection fails, the next call tries again
    calls = 0;
    expect(await probe(flaky(serverError(238, 'NotImplemented'), 1))).toBe(false);
    calls = 0;
    await expect(probe(flaky(serverError(13, 'Unauthorized'), 1))).rejects.toMatchObject({ code: 13 });
  });
});
