import { StowageError } from './errors.js';

export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/**
 * Turns values into JSON text and back. The default, {@link jsonCodec}, accepts only values
 * that come back identical; pass your own codec (see {@link richCodec}) for Dates, BigInts
 * and byte arrays.
 */
export interface Codec {
  encode(value: unknown): string;
  decode(text: string): unknown;
}

/**
 * Throws `E_INVALID_VALUE` unless `value` is plain JSON that survives
 * `JSON.parse(JSON.stringify(value))` unchanged: no `undefined`, functions, symbols, BigInts,
 * non-finite numbers, class instances (Date, Map, …) or cycles.
 */
export function assertJsonValue(value: unknown, what = 'value'): asserts value is JsonValue {
  // The common case, valid JSON, is checked without building paths; only a bad value pays
  // for the walk that names where the problem is.
  if (!isPlainJson(value, 0)) assertJsonValueSlowly(value, what);
}

/**
 * Past this depth the fast check gives up and leaves the verdict to the slow walk, which
 * tracks ancestors: this is how a cycle is caught without tracking them on the common path.
 */
const FAST_CHECK_MAX_DEPTH = 1000;

/** True when `value` is plain JSON no deeper than {@link FAST_CHECK_MAX_DEPTH}. */
function isPlainJson(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth === FAST_CHECK_MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], depth + 1)) return false;
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      // A plain object inherits no enumerable properties, so `for…in` sees its own ones.
      for (const key in value) if (!isPlainJson((value as Record<string, unknown>)[key], depth + 1)) return false;
      return true;
    }
    default:
      return false;
  }
}

/** Throws the `E_INVALID_VALUE` that says where in `value` the non-JSON part is, if there is one. */
function assertJsonValueSlowly(value: unknown, what: string): void {
  const seen = new Set<object>();
  const visit = (current: unknown, path: string): void => {
    switch (typeof current) {
      case 'string':
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(current)) fail(path, `${current} is not a finite number`);
        return;
      case 'object': {
        if (current === null) return;
        if (seen.has(current)) fail(path, 'contains a cycle');
        seen.add(current);
        if (Array.isArray(current)) {
          // Indexed, so that a hole is seen (as undefined).
          for (let index = 0; index < current.length; index++) visit(current[index], `${path}[${index}]`);
        } else {
          const proto = Object.getPrototypeOf(current);
          if (proto !== Object.prototype && proto !== null) {
            fail(path, `is a ${current.constructor?.name ?? 'class instance'}, not a plain object (use a codec)`);
          }
          for (const [key, item] of Object.entries(current)) visit(item, `${path}.${key}`);
        }
        seen.delete(current);
        return;
      }
      default:
        fail(path, `is ${typeof current}, which JSON cannot hold`);
    }
  };
  const fail = (path: string, problem: string): never => {
    throw new StowageError('E_INVALID_VALUE', `${path} ${problem}`);
  };
  visit(value, what);
}

/** Plain JSON, strict: values that would not come back identical are rejected up front. */
export const jsonCodec: Codec = {
  encode(value) {
    assertJsonValue(value);
    return JSON.stringify(value);
  },
  decode: (text) => JSON.parse(text),
};

/**
 * `JSON.stringify(value)`, the encoding awaitly's own adapters store snapshots in: `undefined`,
 * functions and symbols in objects are dropped (in arrays they become `null`), `NaN` and
 * ±Infinity become `null`, a `Date` becomes its ISO string (any `toJSON` is called), a `Map` or
 * `Set` becomes `{}`. Where `JSON.stringify` would throw, this does not: a BigInt becomes its
 * decimal digits as a string (`10n` → `"10"`), and an object met again inside itself (a cycle)
 * becomes the string `"[Circular]"`. `undefined` when `value` itself has no JSON form (e.g. is
 * `undefined`).
 */
export function stringifyLikeJson(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    // a BigInt or a cycle somewhere (or a throwing toJSON, which throws again below)
  }
  // The objects from the root down to the one being written: `this` of the replacer is the
  // object holding `current`, so everything after it on the path is finished.
  const path: unknown[] = [];
  return JSON.stringify(value, function (this: unknown, _key, current: unknown) {
    if (typeof current === 'bigint') return current.toString();
    if (path.length === 0) {
      path.push(current);
      return current;
    }
    const holder = path.indexOf(this);
    if (holder === -1) path.push(this);
    else path.length = holder + 1;
    if (typeof current === 'object' && current !== null && path.includes(current)) return '[Circular]';
    return current;
  });
}

const TYPE_TAG = '$stowage';

/**
 * JSON plus `Date`, `BigInt`, `Uint8Array`, `Map`, `Set` and `undefined` inside objects,
 * tagged as `{ "$stowage": type, "v": … }`.
 */
export const richCodec: Codec = {
  encode(value) {
    return JSON.stringify(value, function (this: Record<string, unknown>, key, current: unknown) {
      const raw = this[key];
      if (raw instanceof Date) return { [TYPE_TAG]: 'Date', v: raw.toISOString() };
      if (typeof raw === 'bigint') return { [TYPE_TAG]: 'BigInt', v: raw.toString() };
      if (raw instanceof Uint8Array) return { [TYPE_TAG]: 'Uint8Array', v: Buffer.from(raw).toString('base64') };
      if (raw instanceof Map) return { [TYPE_TAG]: 'Map', v: [...raw.entries()] };
      if (raw instanceof Set) return { [TYPE_TAG]: 'Set', v: [...raw.values()] };
      if (raw === undefined && key !== '') return { [TYPE_TAG]: 'undefined' };
      return current;
    });
  },
  decode(text) {
    const decoded: unknown = JSON.parse(text, (_key, current: unknown) => {
      if (!current || typeof current !== 'object') return current;
      // Children are revived first. A reviver returning `undefined` would delete the property,
      // so tagged undefineds come back as a marker that the parent turns into a real `undefined`.
      const record = current as Record<string, unknown>;
      for (const key of Object.keys(record)) if (record[key] === UNDEFINED_MARKER) record[key] = undefined;
      if (TYPE_TAG in current) {
        const tagged = current as { [TYPE_TAG]: string; v: unknown };
        switch (tagged[TYPE_TAG]) {
          case 'Date':
            return new Date(tagged.v as string);
          case 'BigInt':
            return BigInt(tagged.v as string);
          case 'Uint8Array':
            return new Uint8Array(Buffer.from(tagged.v as string, 'base64'));
          case 'Map':
            return new Map(tagged.v as [unknown, unknown][]);
          case 'Set':
            return new Set(tagged.v as unknown[]);
          case 'undefined':
            return UNDEFINED_MARKER;
        }
      }
      return current;
    });
    return decoded === UNDEFINED_MARKER ? undefined : decoded;
  },
};

const UNDEFINED_MARKER = Symbol('undefined');

/** Throws `E_INVALID_OPTION` unless `codec` has `encode` and `decode` functions. */
export function assertCodec(codec: unknown, what = 'codec'): asserts codec is Codec {
  if (
    codec === null ||
    typeof codec !== 'object' ||
    typeof (codec as Codec).encode !== 'function' ||
    typeof (codec as Codec).decode !== 'function'
  ) {
    throw new StowageError('E_INVALID_OPTION', `${what} must have encode() and decode() functions`);
  }
}

/**
 * Encodes with `codec`; anything the codec cannot turn into text that every backend stores
 * exactly (it throws, returns something else, as `JSON.stringify(undefined)` does, or returns
 * a string with a lone surrogate, which a database would store as U+FFFD) is `E_INVALID_VALUE`.
 */
export function encodeValue(codec: Codec, value: unknown, what = 'value'): string {
  let text: unknown;
  try {
    text = codec.encode(value);
  } catch (error) {
    if (error instanceof StowageError) throw error;
    throw new StowageError('E_INVALID_VALUE', `${what} could not be encoded`, { cause: error });
  }
  if (typeof text !== 'string') throw new StowageError('E_INVALID_VALUE', `${what} could not be encoded as text`);
  if (!text.isWellFormed()) throw new StowageError('E_INVALID_VALUE', `the codec encoded ${what} as text with a lone surrogate, which no backend stores exactly`);
  return text;
}

/**
 * Decodes stored text with `codec`; text it cannot decode (a row written by other code, or
 * under another codec) is `E_INVALID_VALUE` with the codec's error as `cause`, never the
 * codec's raw `SyntaxError`.
 */
export function decodeValue(codec: Codec, text: string, what = 'the stored value'): unknown {
  try {
    return codec.decode(text);
  } catch (error) {
    if (error instanceof StowageError) throw error;
    throw new StowageError('E_INVALID_VALUE', `${what} could not be decoded`, { cause: error });
  }
}
