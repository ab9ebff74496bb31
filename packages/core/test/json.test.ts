import { describe, expect, it } from 'vitest';
import { assertCodec, assertJsonValue, encodeValue, jsonCodec, richCodec, stringifyLikeJson } from '../src/json.js';
import { JSON_VALUES, NON_JSON_VALUES, richValue } from '../src/conformance/helpers.js';

const code = (fn: () => unknown) => {
  try {
    fn();
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code;
  }
};

describe('jsonCodec', () => {
  it('round-trips every JSON value of the conformance catalogue', () => {
    for (const [label, value] of JSON_VALUES) expect(jsonCodec.decode(jsonCodec.encode(value)), label).toStrictEqual(value);
  });

  it('rejects values that would not come back identical with E_INVALID_VALUE', () => {
    for (const [label, value] of NON_JSON_VALUES) expect(code(() => jsonCodec.encode(value)), label).toBe('E_INVALID_VALUE');
  });

  it('stores -0 as 0 (JSON has no negative zero)', () => {
    expect(Object.is(jsonCodec.decode(jsonCodec.encode(-0)), 0)).toBe(true);
  });

  it('accepts shared (non-cyclic) references', () => {
    const shared = { a: 1 };
    expect(code(() => assertJsonValue({ x: shared, y: shared }))).toBe('ok');
  });

  it('accepts null-prototype objects', () => {
    const bare = Object.assign(Object.create(null), { a: 1 });
    expect(code(() => assertJsonValue(bare))).toBe('ok');
  });
});

describe("stringifyLikeJson (how snapshots are encoded, as awaitly's own adapters do)", () => {
  it('is JSON.stringify wherever JSON.stringify does not throw', () => {
    for (const [label, value] of [...JSON_VALUES, ...NON_JSON_VALUES.filter(([name]) => name !== 'BigInt' && name !== 'cycle')]) {
      expect(stringifyLikeJson({ value, list: [value] }), label).toBe(JSON.stringify({ value, list: [value] }));
    }
    expect(stringifyLikeJson(undefined)).toBeUndefined();
  });

  it('writes a BigInt as its digits and an object met again inside itself as "[Circular]"; shared objects are written each time', () => {
    const cyclic: Record<string, unknown> = { name: 'root' };
    cyclic.self = cyclic;
    cyclic.child = { back: cyclic, list: [cyclic, 1n] };
    const shared = { n: -12345678901234567890n };
    expect(JSON.parse(stringifyLikeJson({ cyclic, a: shared, b: [shared, shared] })!)).toStrictEqual({
      cyclic: { name: 'root', self: '[Circular]', child: { back: '[Circular]', list: ['[Circular]', '1'] } },
      a: { n: '-12345678901234567890' },
      b: [{ n: '-12345678901234567890' }, { n: '-12345678901234567890' }],
    });
  });

  it('a throwing toJSON still throws (the snapshot store reports it as E_INVALID_VALUE)', () => {
    expect(() => stringifyLikeJson({ bad: { toJSON: () => { throw new Error('no'); } } })).toThrow('no');
  });
});

describe('richCodec', () => {
  it('round-trips Date, BigInt, Uint8Array, Map, Set and undefined inside objects', () => {
    const value = { ...richValue(), map: new Map([['k', 1]]), set: new Set([1, 2]), missing: undefined };
    expect(richCodec.decode(richCodec.encode(value))).toStrictEqual(value);
  });
});

describe('codec helpers', () => {
  it('encodeValue turns codec failures and non-string output into E_INVALID_VALUE', () => {
    expect(encodeValue(jsonCodec, { a: 1 })).toBe('{"a":1}');
    expect(code(() => encodeValue(richCodec, undefined))).toBe('E_INVALID_VALUE');
    const throwing = { encode: () => { throw new TypeError('nope'); }, decode: (text: string) => text };
    expect(code(() => encodeValue(throwing, 1))).toBe('E_INVALID_VALUE');
  });

  it('assertCodec wants encode and decode functions', () => {
    expect(code(() => assertCodec(jsonCodec))).toBe('ok');
    expect(code(() => assertCodec({ encode: () => '' }))).toBe('E_INVALID_OPTION');
    expect(code(() => assertCodec(null))).toBe('E_INVALID_OPTION');
  });
});

describe('assertJsonValue on arrays with holes', () => {
  it('rejects them: JSON would turn a hole into null', () => {
    // eslint-disable-next-line no-sparse-arrays
    expect(() => assertJsonValue([1, , 3])).toThrow(expect.objectContaining({ code: 'E_INVALID_VALUE' }));
  });
});

describe('assertJsonValue on deep values', () => {
  const nested = (depth: number, leaf: unknown): unknown => {
    let value: unknown = leaf;
    for (let i = 0; i < depth; i++) value = i % 2 === 0 ? { child: value } : [value];
    return value;
  };

  it('accepts JSON nested deeper than the fast check goes', () => {
    expect(code(() => assertJsonValue(nested(3000, 'leaf')))).toBe('ok');
  });

  it('finds a bad leaf or a cycle deep down, and says where', () => {
    expect(() => assertJsonValue(nested(3000, Number.NaN))).toThrow(expect.objectContaining({ code: 'E_INVALID_VALUE', message: expect.stringContaining('NaN is not a finite number') }));
    const top: Record<string, unknown> = {};
    let bottom = top;
    for (let i = 0; i < 1500; i++) bottom = (bottom.next = {}) as Record<string, unknown>;
    bottom.next = top;
    expect(() => assertJsonValue(top)).toThrow(expect.objectContaining({ code: 'E_INVALID_VALUE', message: expect.stringContaining('contains a cycle') }));
    expect(() => assertJsonValue({ a: [1, 2, { b: undefined }] })).toThrow(expect.objectContaining({ message: 'value.a[2].b is undefined, which JSON cannot hold' }));
  });
});
