import { assertValidKey, escapeLike, parseGlob } from '@stowage/core';

/**
 * Keys (and key-value values) as PostgreSQL stores them.
 *
 * A `text` value cannot hold U+0000, but a stowage key or value may contain it. They are
 * therefore stored with a reversible, per-character escape: U+0000 becomes U+0001 "0" and
 * U+0001 becomes U+0001 "1". Every other string (all ordinary ones) is stored exactly as
 * given, so the table stays readable in SQL. The escape works per character, so "starts with"
 * survives it: a key starts with P exactly when its stored form starts with the stored form of P.
 */
const ESCAPE = '\u0001';
// Control characters are the point of these expressions.
/* eslint-disable no-control-regex */
const TO_ESCAPE = /[\u0000\u0001]/g;
const ESCAPED = /\u0001([01])/g;
/* eslint-enable no-control-regex */

export function encodeText(text: string): string {
  // two scans for one character each are much faster than a character-class scan of a long value
  return text.includes('\u0000') || text.includes(ESCAPE)
    ? text.replace(TO_ESCAPE, (char) => (char === '\u0000' ? `${ESCAPE}0` : `${ESCAPE}1`))
    : text;
}

export function decodeText(stored: string): string {
  return stored.includes(ESCAPE) ? stored.replace(ESCAPED, (_, digit: string) => (digit === '0' ? '\u0000' : ESCAPE)) : stored;
}

/** Validates `key` (`E_INVALID_KEY`) and returns it as stored. */
export function storedKey(key: unknown, what = 'key'): string {
  assertValidKey(key, what);
  return encodeText(key);
}

/** `LIKE` pattern (escape `\`) matching stored keys that start with `prefix`. */
export function storedPrefixLike(prefix: string): string {
  return `${escapeLike(encodeText(prefix))}%`;
}

/**
 * The parameters of {@link keyMatchSql} for a glob (`E_INVALID_KEY` when malformed), under a
 * literal prefix (a cache's namespace).
 */
export function globParameters(pattern: unknown, literalPrefix = ''): [prefixLike: string, like: string, regex: string] {
  const tokens = parseGlob(pattern);
  const first = tokens[0];
  const fixedStart = literalPrefix + (first?.kind === 'literal' ? first.text : '');
  let like = escapeLike(encodeText(literalPrefix));
  let regex = `^${escapeRegex(encodeText(literalPrefix))}`;
  for (const token of tokens) {
    if (token.kind === 'anyRun') {
      like += '%';
      regex += `${ONE_STORED_CHARACTER}*`;
    } else if (token.kind === 'anyOne') {
      like += '_';
      regex += ONE_STORED_CHARACTER;
    } else {
      like += escapeLike(encodeText(token.text));
      regex += escapeRegex(encodeText(token.text));
    }
  }
  return [storedPrefixLike(fixedStart), like, `${regex}$`];
}

/**
 * SQL matching `column` against a glob, given {@link globParameters} as `$n` placeholders.
 * The first `LIKE` narrows by the literal start (and can use the primary key index); keys
 * without escapes then match with the plain `LIKE`; escaped keys with a regular expression
 * in which an escape pair counts as one character.
 */
export function keyMatchSql(column: string, prefixLike: string, like: string, regex: string): string {
  return `(${column} LIKE ${prefixLike} AND CASE WHEN strpos(${column}, chr(1)) = 0 THEN ${column} LIKE ${like} ELSE ${column} ~ ${regex} END)`;
}

/** One key character in stored form: an escape pair, or any character but the escape. */
const ONE_STORED_CHARACTER = `(?:${ESCAPE}[01]|[^${ESCAPE}])`;

/** Escapes a literal for a PostgreSQL (ARE) regular expression; control characters stay raw (they are literal there). */
function escapeRegex(literal: string): string {
  return literal.replace(/[\\^$.*+?()[\]{}|]/g, (char) => `\\${char}`);
}
