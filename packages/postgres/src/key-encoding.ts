/*
 * Keys and text values (key-value values, the codec text of caches, checkpoints and
 * idempotency results) as PostgreSQL stores them.
 *
 * A `text` value cannot hold U+0000, but a stowage key or value may contain it. They are
 * therefore stored with a reversible, per-character escape: U+0000 becomes U+0001 "0" and
 * U+0001 becomes U+0001 "1". Every other string (all ordinary ones) is stored exactly as
 * given, so the table stays readable in SQL. The escape works per character, so "starts with"
 * survives it (a key starts with P exactly when its stored form starts with the stored form
 * of P), and so does order: stored keys sort in `COLLATE "C"` as the keys do in code point
 * order, so batches lock rows in the order the kit gives them. Globs match the stored form
 * (glob.ts).
 */

/** Starts every escape of the stored form: U+0001 then "0" (for U+0000) or "1" (for U+0001). */
export const ESCAPE = '\u0001';
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
