/**
 * The hostile-input corpus. Each case feeds one nasty input to stowage and says what must
 * happen: it round-trips exactly (`roundtrip`), or it fails with a given StowageError code;
 * a few list both where the contract allows either (a 16 MB value may exceed a backend's
 * document limit, but then it must be E_INVALID_VALUE and leave the old value in place).
 *
 * A case returns its outcome as a string: 'roundtrip', an error code, or a description of
 * what went wrong ('mismatch: …', 'raw …' for an error that is not a StowageError,
 * 'inconsistent: …' when contracts disagree about the same input).
 */
import { isDeepStrictEqual } from 'node:util';
import {
  escapeGlob,
  isStowageError,
  type CacheProvider,
  type JsonObject,
  type KeyValueStore,
  type LockProvider,
  type SnapshotStore,
  type StowageErrorCode,
} from '@stowage/core';
import { ALL_BACKENDS, MONGO_BACKENDS, POSTGRES_BACKENDS, type BackendName, type OpenOptions } from '../backends/types.ts';
import { describeError } from '../report.ts';

export type Outcome = 'roundtrip' | StowageErrorCode;

export interface CorpusTools {
  backend: BackendName;
  kv: KeyValueStore;
  cache: CacheProvider;
  snapshots: SnapshotStore<JsonObject>;
  locks: LockProvider;
  largeValueBytes: number;
  /** Opens a key-value store with hostile constructor options. */
  openKv(options: OpenOptions): Promise<KeyValueStore>;
}

export interface CorpusCase {
  id: string;
  /** Allowed outcomes; anything else fails the case. */
  expect: readonly Outcome[];
  /** Backends the case applies to (default: all). */
  only?: readonly BackendName[];
  /** Longer per-case limit for the 16 MB cases. */
  large?: boolean;
  run(tools: CorpusTools): Promise<string>;
}

export class Mismatch extends Error {}

/** Any value from untyped JavaScript, passed where a typed argument is expected. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Untyped = any;

export function classify(error: unknown): string {
  if (error instanceof Mismatch) return `mismatch: ${error.message}`;
  if (isStowageError(error)) return error.code;
  return `raw ${describeError(error)}`;
}

export async function outcomeOf(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
    return 'roundtrip';
  } catch (error) {
    return classify(error);
  }
}

export function preview(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'string' ? JSON.stringify(value) : typeof value === 'bigint' ? `${value}n` : (JSON.stringify(value) ?? String(value));
  } catch {
    text = Object.prototype.toString.call(value);
  }
  return text.length > 60 ? `${text.slice(0, 57)}…(${text.length} chars)` : text;
}

function equal(actual: unknown, expected: unknown, what: string): void {
  if (!isDeepStrictEqual(actual, expected)) throw new Mismatch(`${what}: got ${preview(actual)}, want ${preview(expected)}`);
}

/** Runs the same input through several operations; they must all end the same way. */
async function consistent(parts: Record<string, () => Promise<unknown>>): Promise<string> {
  const outcomes: [string, string][] = [];
  for (const [name, fn] of Object.entries(parts)) outcomes.push([name, await outcomeOf(fn)]);
  const distinct = new Set(outcomes.map(([, outcome]) => outcome));
  if (distinct.size === 1) return outcomes[0]![1];
  return `inconsistent: ${outcomes.map(([name, outcome]) => `${name}=${outcome}`).join(', ')}`;
}

type Contract = 'kv' | 'cache' | 'snapshots' | 'locks';
const EVERY_CONTRACT: readonly Contract[] = ['kv', 'cache', 'snapshots', 'locks'];

/** A valid key must round-trip through every contract, and match only itself as an escaped glob / literal prefix. */
function keyRoundTrip(key: string, contracts: readonly Contract[] = EVERY_CONTRACT) {
  return (t: CorpusTools) => {
    const value = `value for ${key}`;
    const parts: Record<string, () => Promise<unknown>> = {
      kv: async () => {
        await t.kv.set(key, value);
        equal(await t.kv.get(key), value, 'kv.get');
        equal(await t.kv.exists(key), true, 'kv.exists');
        equal(await t.kv.getMany([key, 'absent-key']), [value, null], 'kv.getMany');
        equal(await t.kv.keys(escapeGlob(key)), [key], 'kv.keys(escaped key)');
        equal((await t.kv.getEntry(key))?.value, value, 'kv.getEntry');
        equal(await t.kv.delete(key), true, 'kv.delete');
        equal(await t.kv.get(key), null, 'kv.get after delete');
      },
      cache: async () => {
        await t.cache.set(key, { key });
        equal(await t.cache.get(key), { key }, 'cache.get');
        equal(await t.cache.has(key), true, 'cache.has');
        equal(await t.cache.keys(escapeGlob(key)), [key], 'cache.keys(escaped key)');
        await t.cache.delete(key);
        equal(await t.cache.get(key), null, 'cache.get after delete');
      },
      snapshots: async () => {
        await t.snapshots.save(key, { key });
        equal(await t.snapshots.load(key), { key }, 'snapshots.load');
        const listed = await t.snapshots.list({ prefix: key, limit: 100 });
        if (!listed.some((item) => item.id === key)) throw new Mismatch('snapshots.list(prefix) misses the id');
        const strangers = listed.filter((item) => !item.id.startsWith(key));
        if (strangers.length > 0) throw new Mismatch(`snapshots.list(prefix) returned ${preview(strangers[0]!.id)}: prefix was not literal`);
        await t.snapshots.delete(key);
        equal(await t.snapshots.load(key), null, 'snapshots.load after delete');
      },
      locks: async () => {
        const handle = await t.locks.acquire(key, 5000);
        if (handle === null) throw new Mismatch('locks.acquire returned null for a free key');
        equal(handle.key, key, 'handle.key');
        equal(await t.locks.acquire(key, 5000), null, 'second acquire while held');
        await handle.release();
      },
    };
    return consistent(Object.fromEntries(contracts.map((contract) => [contract, parts[contract]!])));
  };
}

/** An invalid key must be refused by every operation of every contract, before anything is stored. */
function keyRejected(key: Untyped, { snapshots = true } = {}) {
  return (t: CorpusTools) =>
    consistent({
      'kv.set': () => t.kv.set(key, 'x'),
      'kv.get': () => t.kv.get(key),
      'kv.delete': () => t.kv.delete(key),
      'kv.getMany': () => t.kv.getMany(['fine', key]),
      'kv.setMany': () => t.kv.setMany([{ key, value: 'x' }]),
      'kv.compareAndSet': () => t.kv.compareAndSet(key, 'x', null),
      'cache.set': () => t.cache.set(key, 1),
      'cache.get': () => t.cache.get(key),
      ...(snapshots && {
        'snapshots.save': () => t.snapshots.save(key, {}),
        'snapshots.load': () => t.snapshots.load(key),
      }),
      'locks.acquire': () => t.locks.acquire(key, 1000),
    });
}

/** A snapshot id over 1024 bytes is saved, loaded and deleted (stored in its fitted form, see `fitKey`). */
function longSnapshotId(id: string) {
  return (t: CorpusTools) =>
    consistent({
      snapshots: async () => {
        await t.snapshots.save(id, { id });
        equal(await t.snapshots.load(id), { id }, 'snapshots.load');
        await t.snapshots.delete(id);
        equal(await t.snapshots.load(id), null, 'snapshots.load after delete');
      },
    });
}

/**
 * Writes a value over an existing one. A value that fails must fail without touching what was
 * stored; a value that succeeds must read back exactly.
 */
function kvValue(value: Untyped) {
  return async (t: CorpusTools) => {
    const key = 'value-case';
    await t.kv.set(key, 'before');
    try {
      return await outcomeOf(() =>
        overwrite(
          async () => {
            await t.kv.set(key, value);
            const read = await t.kv.get(key);
            if (read !== value) throw new Mismatch(`kv.get: got ${preview(read)} (length ${read?.length}), want ${preview(value)}`);
          },
          () => t.kv.get(key),
          'before',
          'value',
        ),
      );
    } finally {
      await t.kv.delete(key);
    }
  };
}

/**
 * Runs `write` over a stored `before` value. A write that is refused must leave `before` in
 * place; one that succeeds must read back exactly (checked by `write` itself).
 */
async function overwrite(write: () => Promise<void>, readBack: () => Promise<unknown>, before: unknown, what: string): Promise<void> {
  let failure: unknown;
  try {
    await write();
  } catch (error) {
    failure = error;
  }
  if (failure === undefined || failure instanceof Mismatch) {
    if (failure !== undefined) throw failure;
    return;
  }
  if (!isDeepStrictEqual(await readBack(), before)) throw new Mismatch(`${classify(failure)}, and the previous ${what} was lost`);
  throw failure;
}

/** A JSON value through the cache and/or (for objects) the snapshot store. */
function jsonValue(value: Untyped, options: { snapshots?: boolean; cache?: boolean } = {}) {
  return async (t: CorpusTools) => {
    const key = 'json-case';
    const parts: Record<string, () => Promise<unknown>> = {};
    if (options.cache !== false) {
      parts.cache = async () => {
        await t.cache.set(key, 'before');
        try {
          await overwrite(
            async () => {
              await t.cache.set(key, value);
              equal(await t.cache.get(key), value, 'cache.get');
            },
            () => t.cache.get(key),
            'before',
            'value',
          );
        } finally {
          await t.cache.delete(key);
        }
      };
    }
    if (options.snapshots) {
      parts.snapshots = async () => {
        await t.snapshots.save(key, { before: true });
        try {
          await overwrite(
            async () => {
              await t.snapshots.save(key, value);
              equal(await t.snapshots.load(key), value, 'snapshots.load');
            },
            () => t.snapshots.load(key),
            { before: true },
            'snapshot',
          );
        } finally {
          await t.snapshots.delete(key);
        }
      };
    }
    const outcome = await consistent(parts);
    if ((Object.prototype as Record<string, unknown>).polluted !== undefined) return 'mismatch: Object.prototype was polluted';
    return outcome;
  };
}

/** Expects `fn` to be refused with a code. */
function refused(fn: (t: CorpusTools) => Promise<unknown>) {
  return (t: CorpusTools) => outcomeOf(() => fn(t));
}

/** Keys under `pat/` for the pattern cases, and the glob results each pattern must give (as sets). */
export const PATTERN_SEEDS = ['a%b', 'axb', 'a_b', 'a.b', 'a*b', 'a?b', 'a\\b', 'a[b', 'ab', 'abc', '%', '_', '$where', 'x(y)', '(a+)+$', 'a\nb', 'ä€😀', 'a'.repeat(40)];

function patternCase(suffixPattern: string, expected: readonly string[]) {
  return async (t: CorpusTools) => {
    const pattern = `pat/${suffixPattern}`;
    const want = expected.map((suffix) => `pat/${suffix}`).sort();
    return consistent({
      'kv.keys': async () => equal((await t.kv.keys(pattern)).sort(), want, `kv.keys(${preview(pattern)})`),
      'cache.keys': async () => equal((await t.cache.keys(pattern)).sort(), want, `cache.keys(${preview(pattern)})`),
    });
  };
}

function patternRefused(pattern: Untyped) {
  return (t: CorpusTools) =>
    consistent({
      'kv.keys': () => t.kv.keys(pattern),
      'kv.entries': () => t.kv.entries(pattern),
      'cache.keys': () => t.cache.keys(pattern),
    });
}

/** A hostile constructor option (table, schema, collection, database name). */
function identifierCase(options: OpenOptions) {
  return async (t: CorpusTools) =>
    outcomeOf(async () => {
      const kv = await t.openKv(options);
      try {
        await kv.set('identifier-case', 'value');
        equal(await kv.get('identifier-case'), 'value', 'kv.get');
      } finally {
        await kv.close();
      }
    });
}

const RT: readonly Outcome[] = ['roundtrip'];
const BAD_KEY: readonly Outcome[] = ['E_INVALID_KEY'];
const BAD_VALUE: readonly Outcome[] = ['E_INVALID_VALUE'];
const BAD_OPTION: readonly Outcome[] = ['E_INVALID_OPTION'];
const RT_OR_BAD_VALUE: readonly Outcome[] = ['roundtrip', 'E_INVALID_VALUE'];
const RT_OR_BAD_OPTION: readonly Outcome[] = ['roundtrip', 'E_INVALID_OPTION'];

const big = (t: CorpusTools) => 'x'.repeat(t.largeValueBytes);
const deep = (depth: number): JsonObject => {
  let value: JsonObject = { leaf: true };
  for (let i = 0; i < depth; i++) value = { d: value };
  return value;
};
const cyclic = () => {
  const value: Record<string, unknown> = { a: 1 };
  value.self = value;
  return value;
};

const POSTGRES = POSTGRES_BACKENDS;
const MONGO = MONGO_BACKENDS;

export function buildCorpus(canaryName: string): CorpusCase[] {
  const cases: CorpusCase[] = [];
  const add = (id: string, expect: readonly Outcome[], run: CorpusCase['run'], extra: Partial<CorpusCase> = {}) =>
    cases.push({ id, expect, run, ...extra });

  // Keys that are valid: SQL and regex metacharacters, Mongo operators, control and odd Unicode characters.
  const validKeys: [string, string][] = [
    ['percent', '%'],
    ['underscore', '_'],
    ['like-mix', 'a%b_c'],
    ['sql-injection', "'; DROP TABLE stowage_kv; --"],
    ['sql-injection-dq', `"; DELETE FROM ${canaryName}; --`],
    ['single-quote', "'"],
    ['sql-comment', '/* -- */'],
    ['backslash', '\\'],
    ['star', '*'],
    ['question', '?'],
    ['bracket-class', '[a-z]'],
    ['regex-dotstar', '.*'],
    ['regex-anchors', '^$'],
    ['regex-redos', '(a+)+$'],
    ['mongo-where', '$where'],
    ['mongo-gt', '$gt'],
    ['dollar', '$'],
    ['dotted', 'a.b.c'],
    ['json-operator', '{"$gt": ""}'],
    ['nul-only', '\u0000'],
    ['nul-inside', 'a\u0000b'],
    ['emoji', '🔒🗝️'],
    ['rtl-override', '\u202Eevil'],
    ['zero-width', '\u200B'],
    ['bom', '\uFEFF'],
    ['max-code-point', '\u{10FFFF}'],
    ['noncharacter', '\uFFFF'],
    ['space', ' '],
    ['control-chars', '\t\n\r\u0001\u001f\u007f'],
    ['proto', '__proto__'],
    ['constructor', 'constructor'],
    ['has-own-property', 'hasOwnProperty'],
    ['path-traversal', '../../etc/passwd'],
    ['sql-sleep', "x' OR pg_sleep(5) IS NULL --"],
  ];
  // jongodb orders strings by UTF-16 code units, not by UTF-8 bytes (MongoDB's order), so a range
  // whose bound follows U+FFFF (the next code point, U+10000) is empty there.
  const notJongodb = { only: ALL_BACKENDS.filter((backend) => backend !== 'jongodb') };
  for (const [name, key] of validKeys) add(`key/${name}`, RT, keyRoundTrip(key), name === 'noncharacter' ? notJongodb : {});
  add('key/1024-bytes-ascii', RT, keyRoundTrip('k'.repeat(1024), ['kv', 'snapshots', 'locks']));
  add('key/1024-bytes-multibyte', RT, keyRoundTrip(`${'€'.repeat(341)}a`, ['kv', 'snapshots', 'locks']));
  add('key/nfc-vs-nfd-distinct', RT, async (t) =>
    outcomeOf(async () => {
      await t.kv.set('\u00e4', 'composed');
      await t.kv.set('a\u0308', 'decomposed');
      equal([await t.kv.get('\u00e4'), await t.kv.get('a\u0308')], ['composed', 'decomposed'], 'NFC/NFD keys');
      await t.kv.deleteMany(['\u00e4', 'a\u0308']);
    }),
  );
  add('key/case-and-trailing-space-distinct', RT, async (t) =>
    outcomeOf(async () => {
      await t.kv.setMany([
        { key: 'Key', value: '1' },
        { key: 'key', value: '2' },
        { key: 'key ', value: '3' },
      ]);
      equal(await t.kv.getMany(['Key', 'key', 'key ']), ['1', '2', '3'], 'distinct keys');
      await t.kv.deleteMany(['Key', 'key', 'key ']);
    }),
  );

  // Keys that are invalid, including what untyped JavaScript passes by mistake or on purpose.
  const invalidKeys: [string, unknown][] = [
    ['empty', ''],
    ['lone-high-surrogate', '\uD800'],
    ['lone-low-surrogate', 'a\uDC00b'],
    ['1025-bytes', 'k'.repeat(1025)],
    ['1026-bytes-multibyte', '€'.repeat(342)],
    ['number', 123],
    ['null', null],
    ['undefined', undefined],
    ['object', {}],
    ['array', ['a']],
    ['mongo-operator-object', { $gt: '' }],
    ['boolean', true],
    ['bigint', 1n],
    ['symbol', Symbol('key')],
    ['string-object', new String('abc')],
    ['to-string-object', { toString: () => 'evil' }],
  ];
  // Snapshot ids longer than 1024 bytes are fitted, not refused: awaitly's durable.run keeps
  // records under `idem:<key>` and swallows a failed save.
  const tooLong = new Set(['1025-bytes', '1026-bytes-multibyte']);
  for (const [name, key] of invalidKeys) add(`bad-key/${name}`, BAD_KEY, keyRejected(key, { snapshots: !tooLong.has(name) }));
  for (const [name, key] of invalidKeys) if (tooLong.has(name)) add(`snapshot-id/${name}`, RT, longSnapshotId(key as string));

  // String values of the key-value store.
  add('value/empty', RT, kvValue(''));
  add('value/nul', RT, kvValue('\u0000'));
  add('value/nuls-inside', RT, kvValue('a\u0000b\u0000'));
  add('value/sql-injection', RT, kvValue("'); DROP TABLE stowage_kv; --"));
  add('value/json-looking', RT, kvValue('{"a":1,"$gt":""}'));
  add('value/escaped-nul-text', RT, kvValue('\\x00 \\u0000 \\0'));
  add('value/crlf', RT, kvValue('line\r\nline\rline\n'));
  add('value/whitespace-only', RT, kvValue('   \t '));
  add('value/unicode-1mb', RT, kvValue('äöü€😀𝄞'.repeat(1024 * 1024 / 16)));
  add('value/lone-surrogate', BAD_VALUE, kvValue('ok\uD800'));
  add('value/large', RT_OR_BAD_VALUE, async (t) => kvValue(big(t))(t), { large: true });
  for (const [name, value] of [
    ['number', 123],
    ['null', null],
    ['undefined', undefined],
    ['mongo-operator-object', { $gt: '' }],
    ['buffer', Buffer.from('x')],
  ] as [string, unknown][]) {
    add(`value/${name}`, BAD_VALUE, kvValue(value));
  }
  add('value/setMany-all-or-nothing', BAD_VALUE, async (t) => {
    const outcome = await outcomeOf(() =>
      t.kv.setMany([
        { key: 'batch-a', value: 'a' },
        { key: 'batch-b', value: 42 as Untyped },
      ]),
    );
    if ((await t.kv.get('batch-a')) !== null) return `${outcome}, but batch-a was written`;
    return outcome;
  });

  // JSON values of the cache (and snapshots, for objects).
  add('json/mongo-operators', RT, jsonValue({ $gt: '', $where: 'sleep(1000)', $set: { x: 1 } }, { snapshots: true }));
  add('json/dotted-and-dollar-keys', RT, jsonValue({ 'a.b': 1, $c: { $d: [1, { 'e.f': null }] } }, { snapshots: true }));
  add('json/_id-field', RT, jsonValue({ _id: 'evil', id: 'x', value: 'shadow' }, { snapshots: true }));
  add('json/proto-key', RT, jsonValue(JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": {"polluted": true}}}'), { snapshots: true }));
  add('json/empty-key', RT, jsonValue({ '': '' }, { snapshots: true }));
  add('json/nul-key', RT_OR_BAD_VALUE, jsonValue({ '\u0000': '\u0000', 'a\u0000b': 1 }, { snapshots: true }));
  add('json/nul-in-string', RT, jsonValue({ text: 'a\u0000b' }, { snapshots: true }));
  add('json/deep-200', RT_OR_BAD_VALUE, jsonValue(deep(200), { snapshots: true }));
  add('json/numbers', RT, jsonValue({ max: Number.MAX_SAFE_INTEGER, big: 1e308, tiny: 5e-324, negative: -1.5e-300, zero: 0 }, { snapshots: true }));
  add('json/array-100k', RT, jsonValue(Array.from({ length: 100_000 }, (_, i) => i)));
  add('json/lone-surrogate-string', RT_OR_BAD_VALUE, jsonValue({ text: 'a\uD800b' }, { snapshots: true }));
  add('json/primitives', RT, async (t) =>
    consistent(Object.fromEntries(['x', 0, false, [], ''].map((value) => [preview(value), async () => {
      await t.cache.set('primitive', value);
      equal(await t.cache.get('primitive'), value, 'cache.get');
    }]))),
  );
  add('json/large-string', RT_OR_BAD_VALUE, async (t) => jsonValue({ text: big(t) })(t), { large: true });
  for (const [name, value] of [
    ['undefined', undefined],
    ['function', () => 1],
    ['nan', Number.NaN],
    ['infinity', Number.POSITIVE_INFINITY],
    ['bigint', 1n],
    ['date', new Date(0)],
    ['map', new Map([[1, 2]])],
    ['cyclic', cyclic()],
    ['symbol-inside', { s: Symbol('x') }],
  ] as [string, unknown][]) {
    add(`json/${name}`, BAD_VALUE, refused((t) => t.cache.set('json-refused', value)));
  }

  // Snapshots: non-objects, versions and list options.
  for (const [name, value] of [
    ['string', 'snapshot'],
    ['null', null],
    ['array', [1, 2]],
    ['number', 7],
  ] as [string, unknown][]) {
    add(`snapshot/${name}`, BAD_VALUE, refused((t) => t.snapshots.save('snapshot-refused', value as Untyped)));
  }
  for (const [name, version] of [
    ['negative', -1],
    ['zero', 0],
    ['fraction', 1.5],
    ['string', '1'],
    ['nan', Number.NaN],
    ['operator-object', { $gt: 0 }],
  ] as [string, unknown][]) {
    add(`snapshot/expectedVersion-${name}`, BAD_OPTION, refused((t) => t.snapshots.save('version-case', {}, { expectedVersion: version as Untyped })));
  }
  for (const [name, options] of [
    ['limit-zero', { limit: 0 }],
    ['limit-negative', { limit: -1 }],
    ['limit-too-big', { limit: 10_001 }],
    ['limit-fraction', { limit: 1.5 }],
    ['limit-string', { limit: '10' }],
    ['prefix-operator-object', { prefix: { $gt: '' } }],
    ['cursor-garbage', { cursor: "'; DROP TABLE x; --" }],
  ] as [string, unknown][]) {
    add(`snapshot/list-${name}`, BAD_OPTION, refused((t) => t.snapshots.listPage(options as Untyped)));
  }
  add('snapshot/list-prefix-is-literal', RT, async (t) =>
    outcomeOf(async () => {
      await t.snapshots.save('lit/a_b', {});
      await t.snapshots.save('lit/axb', {});
      await t.snapshots.save('lit/a%b', {});
      equal((await t.snapshots.list({ prefix: 'lit/a_' })).map((item) => item.id), ['lit/a_b'], 'list(prefix "lit/a_")');
      equal((await t.snapshots.list({ prefix: 'lit/a%' })).map((item) => item.id), ['lit/a%b'], 'list(prefix "lit/a%")');
      for (const id of ['lit/a_b', 'lit/axb', 'lit/a%b']) await t.snapshots.delete(id);
    }),
  );
  add('snapshot/large', RT_OR_BAD_VALUE, async (t) => jsonValue({ formatVersion: 1, blob: big(t) }, { snapshots: true, cache: false })(t), {
    large: true,
  });

  // Option values: durations, owners, versions.
  for (const [name, ttl] of [
    ['zero', 0],
    ['negative', -5],
    ['nan', Number.NaN],
    ['infinity', Number.POSITIVE_INFINITY],
    ['fraction', 0.5],
    ['string', '1000'],
    ['object', {}],
  ] as [string, unknown][]) {
    add(`option/ttl-${name}`, BAD_OPTION, (t) =>
      consistent({
        'kv.set': () => t.kv.set('ttl-case', 'x', { ttl: ttl as Untyped }),
        'cache.set': () => t.cache.set('ttl-case', 'x', ttl as Untyped),
        'locks.acquire': () => t.locks.acquire('ttl-case', ttl as Untyped),
      }),
    );
  }
  add('option/ttl-max-safe-integer', RT_OR_BAD_OPTION, (t) =>
    consistent({
      kv: async () => {
        await t.kv.set('ttl-huge', 'x', { ttl: Number.MAX_SAFE_INTEGER });
        equal(await t.kv.get('ttl-huge'), 'x', 'kv.get');
        await t.kv.delete('ttl-huge');
      },
      cache: async () => {
        await t.cache.set('ttl-huge', 'x', Number.MAX_SAFE_INTEGER);
        equal(await t.cache.get('ttl-huge'), 'x', 'cache.get');
        await t.cache.delete('ttl-huge');
      },
    }),
  );
  for (const [name, owner] of [
    ['empty', ''],
    ['257-chars', 'o'.repeat(257)],
    ['operator-object', { $ne: null }],
    ['lone-surrogate', '\uD800'],
    ['number', 42],
  ] as [string, unknown][]) {
    add(`option/lock-owner-${name}`, BAD_OPTION, refused((t) => t.locks.acquire('owner-case', 1000, { owner: owner as Untyped })));
  }
  add('option/lock-owner-injection', RT, async (t) =>
    outcomeOf(async () => {
      const owner = "x' OR '1'='1";
      const handle = await t.locks.acquire('owner-injection', 5000, owner);
      equal(handle?.owner, owner, 'handle.owner');
      equal(await t.locks.release('owner-injection', "y' OR '1'='1"), false, 'release by another owner');
      equal(await handle!.isValid(), true, 'still held');
      await handle!.release();
    }),
  );
  add('option/lock-wait-negative', BAD_OPTION, refused((t) => t.locks.acquire('wait-case', 1000, { wait: -1 })));
  add('option/compareAndSet-version-string', BAD_OPTION, refused((t) => t.kv.compareAndSet('cas-case', 'x', '1' as Untyped)));
  add('option/compareAndSet-version-operator', BAD_OPTION, refused((t) => t.kv.compareAndSet('cas-case', 'x', { $gt: 0 } as Untyped)));

  // Glob patterns over the seeded `pat/` keys: every character but * ? \ is literal.
  const threeChars = ['a%b', 'axb', 'a_b', 'a.b', 'a*b', 'a?b', 'a\\b', 'a[b', 'abc', 'a\nb', 'ä€😀'];
  const patterns: [string, string, string[]][] = [
    ['percent-literal', 'a%b', ['a%b']],
    ['underscore-literal', 'a_b', ['a_b']],
    ['dot-literal', 'a.b', ['a.b']],
    ['escaped-star', 'a\\*b', ['a*b']],
    ['escaped-question', 'a\\?b', ['a?b']],
    ['escaped-backslash', 'a\\\\b', ['a\\b']],
    ['question-one-char', 'a?b', threeChars.filter((k) => k.startsWith('a') && k.endsWith('b'))],
    ['three-code-points', '???', threeChars],
    ['star-suffix', '*b', [...threeChars.filter((k) => k.endsWith('b')), 'ab']],
    ['lone-percent', '%', ['%']],
    ['lone-underscore', '_', ['_']],
    ['single-char', '?', ['%', '_']],
    ['dollar-where', '$where', ['$where']],
    ['parentheses', 'x(y)', ['x(y)']],
    ['regex-redos-literal', '(a+)+$', ['(a+)+$']],
    ['bracket-class', '[ab]*', []],
    ['regex-dotstar', '.*', []],
    ['many-stars-no-match', `${'*a'.repeat(12)}*c`, []],
  ];
  for (const [name, pattern, expected] of patterns) {
    // jongodb's regular expressions backtrack without bound: this pattern stalls the whole server there.
    add(`pattern/${name}`, RT, patternCase(pattern, expected), name === 'many-stars-no-match' ? notJongodb : {});
  }
  add('pattern/dangling-escape', BAD_KEY, patternRefused('a\\'));
  add('pattern/number', BAD_KEY, patternRefused(42));
  add('pattern/operator-object', BAD_KEY, patternRefused({ $regex: '.*' }));
  add('pattern/lone-surrogate', BAD_KEY, patternRefused('\uD800*'));

  // Identifier options: table/schema (Postgres), collection/database (MongoDB).
  const pgTables: [string, unknown, readonly Outcome[]][] = [
    ['table-injection', `x"; DROP TABLE public.${canaryName}; --`, RT_OR_BAD_OPTION],
    ['table-qualified-name', 'pg_catalog.pg_class', RT_OR_BAD_OPTION],
    ['table-empty', '', BAD_OPTION],
    ['table-nul', 'tab\u0000le', BAD_OPTION],
    ['table-64-chars', 't'.repeat(64), BAD_OPTION],
    ['table-number', 123, BAD_OPTION],
    ['table-object', { toString: () => 'evil' }, BAD_OPTION],
  ];
  for (const [name, table, expect] of pgTables) add(`identifier/${name}`, expect, identifierCase({ table: table as Untyped }), { only: POSTGRES });
  const pgSchemas: [string, unknown, readonly Outcome[]][] = [
    ['schema-injection', `public; DROP TABLE public.${canaryName}; --`, RT_OR_BAD_OPTION],
    ['schema-pg-catalog', 'pg_catalog', BAD_OPTION],
    ['schema-empty', '', BAD_OPTION],
  ];
  for (const [name, schema, expect] of pgSchemas) add(`identifier/${name}`, expect, identifierCase({ schema: schema as Untyped }), { only: POSTGRES });
  const mongoCollections: [string, unknown, readonly Outcome[]][] = [
    ['collection-cmd', '$cmd', BAD_OPTION],
    ['collection-system', 'system.users', BAD_OPTION],
    ['collection-nul', 'a\u0000b', BAD_OPTION],
    ['collection-empty', '', BAD_OPTION],
    ['collection-dollar', 'x.$y', BAD_OPTION],
    ['collection-too-long', 'c'.repeat(300), BAD_OPTION],
    ['collection-operator-json', '{"$gt":""}', BAD_OPTION],
    ['collection-js-injection', "'; db.dropDatabase(); '", RT_OR_BAD_OPTION],
    ['collection-number', 42, BAD_OPTION],
  ];
  for (const [name, collection, expect] of mongoCollections) add(`identifier/${name}`, expect, identifierCase({ table: collection as Untyped }), { only: MONGO });
  const mongoDatabases: [string, unknown][] = [
    ['database-slash', 'a/b'],
    ['database-dot', 'a.b'],
    ['database-dollar', '$where'],
    ['database-too-long', 'd'.repeat(70)],
    ['database-empty', ''],
  ];
  for (const [name, database] of mongoDatabases) add(`identifier/${name}`, BAD_OPTION, identifierCase({ schema: database as Untyped }), { only: MONGO });

  return cases;
}

/** Schema (Postgres) or database (MongoDB) names the corpus may have created outside the namespace. */
export function hostileNamespaces(canaryName: string): string[] {
  return [`public; DROP TABLE public.${canaryName}; --`];
}
