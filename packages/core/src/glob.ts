import { StowageError } from './errors.js';
import { describeType } from './keys.js';

/**
 * Glob patterns are the one pattern language of stowage, the same on every backend:
 *
 * - `*` matches any run of characters (including none),
 * - `?` matches exactly one character (one Unicode code point),
 * - `\` makes the next character literal (`\*`, `\?`, `\\`),
 * - every other character is literal: `%`, `_`, `.`, `(`, `[`, `$`, … are never wildcards.
 *
 * This module compiles a glob to each backend's dialect, always escaped:
 * SQL `LIKE` (Postgres), an anchored regular expression (JavaScript or PCRE/RE2).
 */

export type GlobToken = { kind: 'literal'; text: string } | { kind: 'anyRun' } | { kind: 'anyOne' };

const MAX_PATTERN_LENGTH = 8192;

/** Splits a glob into tokens. Throws `E_INVALID_KEY` for a non-string or a dangling `\`. */
export function parseGlob(pattern: unknown): GlobToken[] {
  if (typeof pattern !== 'string') {
    throw new StowageError('E_INVALID_KEY', `pattern must be a string, got ${describeType(pattern)}`);
  }
  if (pattern.length > MAX_PATTERN_LENGTH) {
    throw new StowageError('E_INVALID_KEY', `pattern is longer than ${MAX_PATTERN_LENGTH} characters`);
  }
  if (!pattern.isWellFormed()) {
    throw new StowageError('E_INVALID_KEY', 'pattern contains a lone surrogate');
  }
  const tokens: GlobToken[] = [];
  let literal = '';
  const flushLiteral = () => {
    if (literal) tokens.push({ kind: 'literal', text: literal });
    literal = '';
  };
  const chars = Array.from(pattern); // code points, so `?` never splits a surrogate pair
  for (let i = 0; i < chars.length; i++) {
    const char = chars[i]!;
    if (char === '\\') {
      const next = chars[++i];
      if (next === undefined) {
        throw new StowageError('E_INVALID_KEY', 'pattern ends with an unfinished escape "\\"');
      }
      literal += next;
    } else if (char === '*') {
      flushLiteral();
      if (tokens.at(-1)?.kind !== 'anyRun') tokens.push({ kind: 'anyRun' });
    } else if (char === '?') {
      flushLiteral();
      tokens.push({ kind: 'anyOne' });
    } else {
      literal += char;
    }
  }
  flushLiteral();
  return tokens;
}

/** Escapes a literal string so that it matches only itself as a glob. */
export function escapeGlob(literal: string): string {
  return literal.replace(/[\\*?]/g, (char) => `\\${char}`);
}

/** Escapes a literal for SQL `LIKE` with the default escape character `\`. */
export function escapeLike(literal: string): string {
  return literal.replace(/[\\%_]/g, (char) => `\\${char}`);
}

/**
 * Compiles a glob to a SQL `LIKE` pattern whose escape character is `\` (the Postgres
 * default; write `LIKE $1` or `LIKE $1 ESCAPE '\'`). `literalPrefix` is prepended as-is
 * (escaped), for namespacing.
 */
export function globToLike(pattern: string, literalPrefix = ''): string {
  let like = escapeLike(literalPrefix);
  for (const token of parseGlob(pattern)) {
    if (token.kind === 'anyRun') like += '%';
    else if (token.kind === 'anyOne') like += '_';
    else like += escapeLike(token.text);
  }
  return like;
}

/** `js`: JavaScript `RegExp` with the `u` flag. `pcre`: MongoDB's PCRE and RE2-based servers. */
export type RegexFlavor = 'js' | 'pcre';

const REGEX_SYNTAX = /[\\^$.*+?()[\]{}|/]/g;

/** Escapes a literal for a regular expression; valid in JavaScript (`u` flag), PCRE and RE2. */
export function escapeRegex(literal: string): string {
  return literal
    .replace(REGEX_SYNTAX, (char) => `\\${char}`)
    // eslint-disable-next-line no-control-regex -- control characters are exactly what this escapes
    .replace(/[\u0000-\u001f\u007f]/g, (char) => `\\x${char.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * Compiles a glob to the source of a fully anchored regular expression. The result needs no
 * flags beyond `u` for JavaScript; `.` is never used, so newlines in keys match like any
 * other character. For `pcre`, the end anchor is `\z` because `$` there also matches before a
 * trailing newline.
 */
export function globToRegexSource(pattern: string, flavor: RegexFlavor = 'js', literalPrefix = ''): string {
  let source = `^${escapeRegex(literalPrefix)}`;
  for (const token of parseGlob(pattern)) {
    if (token.kind === 'anyRun') source += '[\\s\\S]*';
    else if (token.kind === 'anyOne') source += '[\\s\\S]';
    else source += escapeRegex(token.text);
  }
  return source + (flavor === 'js' ? '$' : '\\z');
}

/** The literal text every match starts with; lets a backend narrow the scan with an index. */
export function globLiteralPrefix(pattern: string): string {
  const first = parseGlob(pattern)[0];
  return first?.kind === 'literal' ? first.text : '';
}

/**
 * A parsed glob, as the adapter kit hands it to a backend: parsed once per call, with what a
 * backend needs to narrow the scan (`prefix`, `isLiteral`, `matchesAll`) and a matcher.
 */
export interface Glob {
  readonly pattern: string;
  readonly tokens: readonly GlobToken[];
  /** The literal text every match starts with (`''` when the glob starts with a wildcard). */
  readonly prefix: string;
  /** No wildcard: the glob matches the key `prefix` and nothing else. */
  readonly isLiteral: boolean;
  /** `*`: every key matches. */
  readonly matchesAll: boolean;
  /** Whether a whole key matches, in O(key × pattern) time at worst (see {@link globMatcher}). */
  matches(key: string): boolean;
}

/** Parses `pattern` (`E_INVALID_KEY` when malformed) into a {@link Glob}. */
export function compileGlob(pattern: unknown): Glob {
  const tokens = parseGlob(pattern);
  const first = tokens[0];
  let matcher: ((key: string) => boolean) | undefined;
  return {
    pattern: pattern as string,
    tokens,
    prefix: first?.kind === 'literal' ? first.text : '',
    isLiteral: tokens.every((token) => token.kind === 'literal'),
    matchesAll: tokens.length === 1 && first!.kind === 'anyRun',
    matches: (key) => (matcher ??= globMatcher(pattern as string))(key),
  };
}

/** True when the glob has no wildcard, so it can match one key at most. */
export function isLiteralGlob(pattern: string): boolean {
  return parseGlob(pattern).every((token) => token.kind === 'literal');
}

const ANY_ONE = Symbol('anyOne');
const ANY_RUN = Symbol('anyRun');

/**
 * A matcher that tests whether a whole key matches the glob, in O(key × pattern) time at
 * worst. Match with it in JavaScript, never with a `RegExp` built from
 * {@link globToRegexSource}: a backtracking regex engine takes exponential time on patterns
 * such as `*a*a*a*a*a*a*c`.
 */
export function globMatcher(pattern: string, literalPrefix = ''): (key: string) => boolean {
  const parts: (string | typeof ANY_ONE | typeof ANY_RUN)[] = Array.from(literalPrefix);
  for (const token of parseGlob(pattern)) {
    if (token.kind === 'anyRun') parts.push(ANY_RUN);
    else if (token.kind === 'anyOne') parts.push(ANY_ONE);
    else parts.push(...token.text);
  }
  return (key) => {
    const text = Array.from(key);
    let p = 0;
    let t = 0;
    // Where the last `*` was, and how much text it has swallowed: on a mismatch, let it take one more.
    let runAt = -1;
    let runUntil = 0;
    while (t < text.length) {
      const part = parts[p];
      if (part === ANY_RUN) {
        runAt = p++;
        runUntil = t;
      } else if (p < parts.length && (part === ANY_ONE || part === text[t])) {
        p++;
        t++;
      } else if (runAt !== -1) {
        p = runAt + 1;
        t = ++runUntil;
      } else {
        return false;
      }
    }
    while (parts[p] === ANY_RUN) p++;
    return p === parts.length;
  };
}
