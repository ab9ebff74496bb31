import { describe, expect, it } from 'vitest';
import {
  escapeGlob,
  escapeLike,
  escapeRegex,
  globLiteralPrefix,
  globToLike,
  globMatcher,
  globToRegexSource,
  isLiteralGlob,
  parseGlob,
} from '../src/glob.js';
import { StowageError } from '../src/errors.js';

/** The regular expression a backend that runs JavaScript regexes would build (small inputs only: it backtracks). */
const regexOf = (pattern: string, literalPrefix = '') => new RegExp(globToRegexSource(pattern, 'js', literalPrefix), 'u');
const matches = (pattern: string, key: string) => regexOf(pattern).test(key);

describe('parseGlob', () => {
  it('splits literals, * and ?; collapses runs of *', () => {
    expect(parseGlob('a*?b**c')).toEqual([
      { kind: 'literal', text: 'a' },
      { kind: 'anyRun' },
      { kind: 'anyOne' },
      { kind: 'literal', text: 'b' },
      { kind: 'anyRun' },
      { kind: 'literal', text: 'c' },
    ]);
    expect(parseGlob('')).toEqual([]);
  });

  it('\\ makes the next character literal', () => {
    expect(parseGlob('a\\*b\\?c\\\\d\\x')).toEqual([{ kind: 'literal', text: 'a*b?c\\dx' }]);
  });

  it('rejects non-strings, dangling escapes, lone surrogates and huge patterns with E_INVALID_KEY', () => {
    for (const bad of [42, null, undefined, 'a\\', 'a\ud800', 'x'.repeat(8193)]) {
      expect(() => parseGlob(bad), String(bad).slice(0, 10)).toThrow(expect.objectContaining({ code: 'E_INVALID_KEY' }));
    }
    expect(() => parseGlob('a\\')).toThrow(StowageError);
  });

  it('? is one code point, never half a surrogate pair', () => {
    expect(matches('a?b', 'a😀b')).toBe(true);
    expect(matches('a??b', 'a😀b')).toBe(false);
  });
});

describe('globToRegexSource', () => {
  it('only * and ? are wildcards', () => {
    expect(matches('a_c', 'abc')).toBe(false);
    expect(matches('a_c', 'a_c')).toBe(true);
    expect(matches('a%c', 'abbc')).toBe(false);
    expect(matches('a.c', 'abc')).toBe(false);
    expect(matches('a*c', 'a\nxyz\nc')).toBe(true);
    expect(matches('a?c', 'a\nc')).toBe(true);
    for (const meta of ['^', '$', '+', '(', ')', '[', ']', '{', '}', '|', '/', '.']) {
      expect(matches(`a${meta}c`, `a${meta}c`), meta).toBe(true);
      expect(matches(`a${meta}c`, 'abc'), meta).toBe(false);
    }
  });

  it('is anchored at both ends, also before a trailing newline', () => {
    expect(matches('abc', 'xabc')).toBe(false);
    expect(matches('abc', 'abcx')).toBe(false);
    expect(matches('abc', 'abc\n')).toBe(false);
  });

  it('prepends an escaped literal prefix', () => {
    const regex = regexOf('*', 'p_1:');
    expect(regex.test('p_1:key')).toBe(true);
    expect(regex.test('pX1:key')).toBe(false);
  });

  it('matches NUL and control characters literally', () => {
    expect(matches('a\u0000b', 'a\u0000b')).toBe(true);
    expect(matches('a\u0000b', 'a b')).toBe(false);
  });

  it('pcre flavour ends with \\z and never uses a bare dot', () => {
    const source = globToRegexSource('a.b*?', 'pcre');
    expect(source.endsWith('\\z')).toBe(true);
    expect(source).toBe('^a\\.b[\\s\\S]*[\\s\\S]\\z');
  });
});

describe('globToLike', () => {
  it('translates wildcards and escapes %, _ and \\', () => {
    expect(globToLike('a*b?c')).toBe('a%b_c');
    expect(globToLike('50%_off\\*')).toBe('50\\%\\_off*');
    expect(globToLike('back\\\\slash')).toBe('back\\\\slash');
    expect(globToLike('*', 'p_%:')).toBe('p\\_\\%:%');
  });
});

describe('escape helpers', () => {
  it('escapeGlob round-trips any literal through parseGlob', () => {
    for (const literal of ['plain', 'a*b?c\\d', '\\', '**', '%_.']) {
      expect(parseGlob(escapeGlob(literal))).toEqual([{ kind: 'literal', text: literal }]);
      expect(isLiteralGlob(escapeGlob(literal))).toBe(true);
    }
  });

  it('escapeLike and escapeRegex escape exactly their syntax', () => {
    expect(escapeLike('a%b_c\\d.e')).toBe('a\\%b\\_c\\\\d.e');
    expect(new RegExp(`^${escapeRegex('^$.*+?()[]{}|/\\')}$`, 'u').test('^$.*+?()[]{}|/\\')).toBe(true);
  });

  it('globLiteralPrefix and isLiteralGlob', () => {
    expect(globLiteralPrefix('user:*:x')).toBe('user:');
    expect(globLiteralPrefix('*x')).toBe('');
    expect(globLiteralPrefix('a\\*b*')).toBe('a*b');
    expect(isLiteralGlob('a?b')).toBe(false);
  });
});

describe('globMatcher', () => {
  const patterns = ['*', 'a*', '*c', 'a?c', 'a*b*c', '??', 'a\\*c', 'a\\?c', '*😀*', 'p_%.*', '', 'abc', '*a*a*', 'a\u0000*'];
  const keys = ['', 'a', 'abc', 'a*c', 'a?c', 'aXc', 'abbbc', 'a😀c', '😀', 'p_%.x', 'p1%.x', 'aaa', 'a\u0000b', 'a\nc', 'ab\nbc'];

  it('agrees with the anchored regular expression on every pattern and key', () => {
    for (const pattern of patterns) {
      const matcher = globMatcher(pattern);
      for (const key of keys) expect(matcher(key), `${JSON.stringify(pattern)} ~ ${JSON.stringify(key)}`).toBe(matches(pattern, key));
    }
  });

  it('treats the literal prefix as literal', () => {
    const matcher = globMatcher('*', 'p_1:');
    expect(matcher('p_1:key')).toBe(true);
    expect(matcher('pX1:key')).toBe(false);
  });

  it('answers patterns that make a backtracking regex explode', () => {
    // A regex from globToRegexSource takes minutes here; the matcher is polynomial.
    expect(globMatcher(`${'*a'.repeat(12)}*c`)('a'.repeat(40))).toBe(false);
    expect(globMatcher(`${'*a'.repeat(12)}*c`)(`${'a'.repeat(40)}c`)).toBe(true);
  });
});
