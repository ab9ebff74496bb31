import { setTimeout as realSleep } from 'node:timers/promises';
import { expect } from 'vitest';
import type { StowageErrorCode } from '../errors.js';

/**
 * A TTL short enough to wait out, long enough that the few round trips a case makes before
 * checking that an entry is still live fit in it even on a slow, loaded backend (FerretDB on
 * two cores needed ~500 ms for a batch write and read under the suite's concurrency).
 */
export const SHORT_TTL = 1_000;
/** Sleep this long after writing with {@link SHORT_TTL} to be sure it expired. */
export const PAST_SHORT_TTL = SHORT_TTL + 300;
/** A lease that outlives any case. */
export const LONG_TTL = 60_000;

export const sleep = (ms: number): Promise<void> => realSleep(ms);

/** Wall-clock time that patching `Date` does not move. */
export const realNow = (): number => performance.timeOrigin + performance.now();

/**
 * Runs `attempt` — writes with {@link SHORT_TTL} and the reads that expect them still live —
 * until one run passes. A run that fails within SHORT_TTL of its start fails the case: the
 * store lost a live entry. A run that fails after a whole SHORT_TTL proves nothing (on a loaded
 * machine its reads may come after the expiry), so it is run again, with the keys of run
 * `run` (1, 2, …) so that what the slow run left behind does not matter; after `runs` slow
 * runs the case fails with the last run's error. Returns what the passing run returned.
 */
export async function withinShortTtl<T>(attempt: (run: number) => Promise<T>, runs = 5): Promise<T> {
  for (let run = 1; ; run++) {
    const started = realNow();
    try {
      return await attempt(run);
    } catch (error) {
      const slow = realNow() - started >= SHORT_TTL;
      if (!slow) throw error;
      if (run >= runs) throw new Error(`each of ${runs} runs took longer than the ${SHORT_TTL} ms ttl it checks`, { cause: error });
    }
  }
}

/** Runs `fn(i)` for i in 0..count-1 at once. */
export function parallel<T>(count: number, fn: (index: number) => Promise<T>): Promise<T[]> {
  return Promise.all(Array.from({ length: count }, (_, index) => fn(index)));
}

/**
 * Asserts that `action()` returns a promise that rejects with a `StowageError` of `code`.
 * A synchronous throw is a failure: every stowage method reports errors by rejecting.
 */
export async function expectReject(action: () => unknown, code: StowageErrorCode, what?: string): Promise<unknown> {
  let returned: unknown;
  try {
    returned = action();
  } catch (error) {
    expect.fail(`${what ?? 'call'} threw synchronously (${describeError(error)}) instead of returning a rejected promise`);
  }
  expect(returned, `${what ?? 'call'} must return a promise`).toBeInstanceOf(Promise);
  let rejection: unknown;
  let rejected = false;
  try {
    await returned;
  } catch (error) {
    rejected = true;
    rejection = error;
  }
  expect(rejected, `${what ?? 'call'} should reject with ${code}`).toBe(true);
  expect(errorCode(rejection), `${what ?? 'call'} rejected with ${describeError(rejection)}`).toBe(code);
  return rejection;
}

/** The stowage code of an error, also when it comes from another copy of @stowage/core. */
export function errorCode(error: unknown): string | undefined {
  if (error && typeof error === 'object' && (error as { name?: unknown }).name === 'StowageError') {
    return (error as { code?: string }).code;
  }
  return undefined;
}

function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}${errorCode(error) ? ` ${errorCode(error)}` : ''}: ${error.message}`;
  return String(error);
}

/** Retries `fn` on `E_VERSION_CONFLICT`: the read-modify-write loop compare-and-set is for. */
export async function retryOnConflict<T>(fn: () => Promise<T>, attempts = 1_000): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (errorCode(error) !== 'E_VERSION_CONFLICT' || attempt >= attempts) throw error;
    }
  }
}

const TEN_MINUTES = 10 * 60_000;
export const CLIENT_SKEWS = [TEN_MINUTES, -TEN_MINUTES] as const;

/**
 * Makes this process's `Date` (both `Date.now()` and `new Date()`) run `offset` ms off, as
 * on a machine with a wrong clock. `performance.now()` and timers are left alone.
 * Always `restore()` in a `finally`.
 */
export class ClientClockSkew {
  readonly #realDate = globalThis.Date;

  set(offset: number): void {
    const RealDate = this.#realDate;
    const skewedNow = () => RealDate.now() + offset;
    globalThis.Date = new Proxy(RealDate, {
      construct(target, args, newTarget) {
        return args.length === 0 ? Reflect.construct(target, [skewedNow()], newTarget) : Reflect.construct(target, args, newTarget);
      },
      apply() {
        return new RealDate(skewedNow()).toString();
      },
      get(target, property, receiver) {
        if (property === 'now') return skewedNow;
        return Reflect.get(target, property, receiver);
      },
    });
  }

  restore(): void {
    globalThis.Date = this.#realDate;
  }
}

/** Runs `fn` with a client clock skewed by `offset`, always restoring `Date`. */
export async function withClientSkew<T>(fn: (skew: ClientClockSkew) => Promise<T>): Promise<T> {
  const skew = new ClientClockSkew();
  try {
    return await fn(skew);
  } finally {
    skew.restore();
  }
}

const encoder = new TextEncoder();
export const utf8Bytes = (text: string): number => encoder.encode(text).length;

/** Keys that break naive SQL, regex and glob handling; every one must round-trip and match only itself. */
export const HOSTILE_KEYS: readonly string[] = [
  'percent%key',
  'under_score',
  'dot.key',
  'star*key',
  'question?key',
  'back\\slash',
  'trailing\\',
  '^caret',
  'dollar$',
  'plus+key',
  '(paren)',
  '[bracket]',
  '{brace}',
  'pipe|key',
  "single'quote",
  'double"quote',
  'back`tick',
  'nul\u0000byte',
  'new\nline',
  'tab\tkey',
  'ünïcödé',
  '日本語キー',
  'emoji😀key',
  ' spaced key ',
  '$leading-dollar',
  'slash/key',
  'semi;colon--comment',
  'k'.repeat(1024),
  '€'.repeat(341) + 'a', // 1024 UTF-8 bytes in 342 characters
  '😀'.repeat(256), // 1024 UTF-8 bytes in 512 UTF-16 code units
];

/** Keys every method must reject with E_INVALID_KEY. */
export const INVALID_KEYS: readonly [string, unknown][] = [
  ['empty string', ''],
  ['1025 bytes', 'k'.repeat(1025)],
  ['1025 bytes of multibyte characters', '€'.repeat(341) + 'ab'],
  ['lone high surrogate', 'a\ud800b'],
  ['lone low surrogate', '\udc00'],
  ['number', 42],
  ['null', null],
  ['undefined', undefined],
  ['object', { key: 'x' }],
];

/** Values the JSON codec must round-trip exactly (compared with toStrictEqual). */
export const JSON_VALUES: readonly [string, unknown][] = [
  ['null', null],
  ['true', true],
  ['false', false],
  ['zero', 0],
  ['negative integer', -42],
  ['fraction', 0.1 + 0.2],
  ['1e21', 1e21],
  ['tiny', 5e-324],
  ['max double', Number.MAX_VALUE],
  ['max safe integer', Number.MAX_SAFE_INTEGER],
  ['negative exponent', -1.5e-7],
  ['empty string', ''],
  ['unicode string', 'ünïcödé 日本語 😀'],
  ['string with NUL and control characters', 'a\u0000b\n\t\r\u001f'],
  ['string that looks like JSON', '{"a":1}'],
  ['empty array', []],
  ['empty object', {}],
  ['mixed array', [1, 'two', null, true, [[]], { three: 3 }]],
  [
    'nested object with awkward keys',
    {
      'dotted.key': 1,
      $leading: 'dollar',
      '': 'empty key',
      'ünï': { '😀': [{ deep: { deeper: { deepest: [null] } } }] },
      __proto_like: { constructor: 'x' },
      'with space': true,
    },
  ],
  ['big array', Array.from({ length: 10_000 }, (_, i) => (i % 3 === 0 ? i : i % 3 === 1 ? `s${i}` : { i }))],
];

/** Values the strict JSON codec must reject with E_INVALID_VALUE. */
export const NON_JSON_VALUES: readonly [string, unknown][] = [
  ['undefined', undefined],
  ['function', () => 1],
  ['symbol', Symbol('s')],
  ['BigInt', 10n],
  ['NaN', Number.NaN],
  ['Infinity', Number.POSITIVE_INFINITY],
  ['Date', new Date(0)],
  ['Map', new Map([[1, 2]])],
  ['class instance', new (class Point { x = 1 })()],
  ['nested undefined', { a: { b: undefined } }],
  ['undefined in an array', [1, undefined]],
  ['cycle', (() => { const cyclic: Record<string, unknown> = {}; cyclic.self = cyclic; return cyclic; })()],
];

/** A value exercising the rich codec. */
export const richValue = () => ({
  when: new Date('2024-01-15T10:30:00.123Z'),
  big: 12345678901234567890n,
  bytes: new Uint8Array([0, 1, 2, 253, 254, 255]),
  nested: { list: [new Date(0), -5n] },
});

export const ONE_MB_STRING = 'x'.repeat(1024 * 1024 - 5) + 'é😀';

/**
 * Errors of a caller's own code that look like a database's: a network code (an HTTP client's
 * `ECONNREFUSED`), a SQLSTATE, a MongoDB driver error's name or code, a driver's words. Passed
 * through stowage (a `getOrSet` loader, a `withLock` function, an abort reason), each must reach
 * the caller as the very same object, never mapped as if the database had thrown it.
 */
export function lookalikeErrors(): [string, Error][] {
  const withFields = (message: string, fields: object) => Object.assign(new Error(message), fields);
  return [
    ['code ECONNREFUSED', withFields('my HTTP call failed', { code: 'ECONNREFUSED' })],
    ['code ETIMEDOUT', withFields('my HTTP call timed out', { code: 'ETIMEDOUT' })],
    ['SQLSTATE 40001', withFields('my own query', { code: '40001' })],
    ['SQLSTATE 23505', withFields('my own insert', { code: '23505' })],
    ['name MongoServerSelectionError', withFields('my own Mongo call', { name: 'MongoServerSelectionError' })],
    ['MongoDB code 50', withFields('my own Mongo call', { code: 50 })],
    ['"Connection terminated"', new Error('Connection terminated unexpectedly')],
    ['"too large"', new Error('the upload is too large')],
  ];
}
