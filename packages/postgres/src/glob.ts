import { escapeLike, type Glob } from '@stowage/core/adapter';
import { ESCAPE, encodeText } from './key-encoding.js';
import { keyRange } from './sql.js';

/*
 * The PostgreSQL side of globs (core's glob.ts parses them): a glob compiled to what a listing
 * statement needs, its parameters ({@link globSelection}) and the SQL that matches a stored key
 * against them ({@link globMatchSql}). Keys are stored escaped (see key-encoding.ts), so the
 * match covers both forms of a stored key.
 */

/** What a listing statement needs to match a glob (see {@link globSelection}). */
export interface GlobSelection {
  /** The two `LIKE` patterns of {@link globMatchSql}. */
  match: [like: string, spreadLike: string];
  /** The key range of the glob's literal start ({@link keyRange}); `null` when it starts with a wildcard. */
  range: [lo: string, hi: string] | null;
}

/**
 * The parameters of a glob for a listing. A glob with a literal start (`user:*`) goes to the
 * statement that narrows by its key range (an index range); one that starts with a wildcard
 * (`*`, `*:draft`) to the whole-table statement. Two statements rather than one with an
 * optional range: each gets a plan that fits it, also as a cached generic plan.
 */
export function globSelection(glob: Glob): GlobSelection {
  const [like, spreadLike] = globMatchParameters(glob);
  if (glob.prefix === '') return { match: [like, spreadLike], range: null };
  const { lo, hi } = keyRange(encodeText(glob.prefix));
  return { match: [like, spreadLike], range: [lo, hi] };
}

/**
 * SQL matching the stored key `column` against a glob, given {@link GlobSelection.match} as
 * `$n` placeholders: keys without an escape match the plain `LIKE`; escaped keys the `LIKE`
 * over their spread form (see {@link escapedKeyMatchSql}), in time linear in the key.
 */
export function globMatchSql(column: string, like: string, spreadLike: string): string {
  return `CASE WHEN strpos(${column}, chr(1)) = 0 THEN ${column} LIKE ${like} ELSE ${escapedKeyMatchSql(column, spreadLike)} END`;
}

/**
 * The parameters of a glob for matching stored keys: the `LIKE` for keys without an escape,
 * and the `LIKE` for escaped keys in their spread form (see {@link escapedKeyMatchSql}). Both
 * are `LIKE` patterns (escape `\`): PostgreSQL matches them in time linear in the key for any
 * glob, where a regular expression per glob character cost milliseconds of server time per
 * row for a long glob and refused longer ones (2201B). The key range of the glob's literal
 * start narrows the rows first ({@link keyRange}).
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
