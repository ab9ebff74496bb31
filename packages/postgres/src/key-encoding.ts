import { escapeLike, type Glob } from '@stowage/core/adapter';

/**
 * Keys and text values (key-value values, the codec text of caches, checkpoints and
 * idempotency results) as PostgreSQL stores them.
 *
 * A `text` value cannot hold U+0000, but a stowage key or value may contain it. They are
 * therefore stored with a reversible, per-character escape: U+0000 becomes U+0001 "0" and
 * U+0001 becomes U+0001 "1". Every other string (all ordinary ones) is stored exactly as
 * given, so the table stays readable in SQL. The escape works per character, so "starts with"
 * survives it (a key starts with P exactly when its stored form starts with the stored form
 * of P), and so does order: stored keys sort in `COLLATE "C"` as the keys do in code point
 * order, so batches lock rows in the order the kit gives them.
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

/**
 * The parameters of a glob for matching stored keys: the `LIKE` for keys without an escape,
 * and the `LIKE` for escaped keys in their spread form (see {@link escapedKeyMatchSql}). Both
 * are `LIKE` patterns (escape `\`): PostgreSQL matches them in time linear in the key for any
 * glob, where a regular expression per glob character cost milliseconds of server time per
 * row for a long glob and refused longer ones (2201B). The key range of the glob's literal
 * start narrows the rows first (`keyRange` in sql.ts).
 */
export function globMatchParameters(glob: Glob): [like: string, spreadLike: string] {
  let like = '';
  let spread = '';
  for (const token of glob.tokens) {
    if (token.kind === 'anyRun') {
      like += '%';
      spread += '%';
    } else if (token.kind === 'anyOne') {
      like += '_';
      spread += '___';
    } else {
      like += escapeLike(encodeText(token.text));
      for (const char of token.text) spread += escapeLike(spreadCharacter(char));
    }
  }
  return [like, spread];
}

/**
 * SQL matching the escaped stored key `column` against the spread `LIKE` pattern of
 * {@link globMatchParameters} (`$n`). The key is first spread to three characters per key
 * character, U+0001 then two characters that tell it:
 *
 * - an ordinary character c: U+0001 c c;
 * - U+0000 (stored U+0001 "0"): U+0001 "01"; U+0001 (stored U+0001 "1"): U+0001 "10".
 *
 * U+0001 starts every character and appears nowhere else, so a literal (which starts with it)
 * can only match at the start of a key character, `?` is `___`, and `*` (`%`) can only end
 * where a key character ends; the two characters after U+0001 are equal for ordinary
 * characters and differ for the escapes, so every key character has its own form. The
 * spreading is one `regexp_replace` of a single-character class and two `replace`s: linear.
 */
export function escapedKeyMatchSql(column: string, spreadLike: string): string {
  const spread = `replace(replace(regexp_replace(${column}, '([^\\x01])', chr(1) || '\\1\\1', 'g'), chr(1) || chr(1) || '00', chr(1) || '01'), chr(1) || chr(1) || '11', chr(1) || '10')`;
  return `${spread} LIKE ${spreadLike}`;
}

/** One key character in the spread form of {@link escapedKeyMatchSql}. */
function spreadCharacter(char: string): string {
  if (char === '\u0000') return `${ESCAPE}01`;
  if (char === ESCAPE) return `${ESCAPE}10`;
  return `${ESCAPE}${char}${char}`;
}

/**
 * The decoded value of each of `keys` (stored form, may repeat) among `rows` read in no
 * particular order by `key = ANY($n)`, in the order of `keys`; `null` where no row came back.
 */
export function valuesInOrder(keys: readonly string[], rows: readonly { key: string; value: string }[]): (string | null)[] {
  const found = new Map(rows.map((row) => [row.key, row.value]));
  return keys.map((key) => {
    const value = found.get(key);
    return value === undefined ? null : decodeText(value);
  });
}
