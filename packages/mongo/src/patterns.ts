import { globToRegexSource, parseGlob } from '@stowage/core';
import type { Document } from 'mongodb';

/**
 * The `_id` filter for a glob (see core's glob rules): an exact match when the glob has no
 * wildcard, nothing when it is `*` without a prefix, otherwise an anchored, escaped regular
 * expression whose literal start lets MongoDB scan only part of the `_id` index.
 * Throws `E_INVALID_KEY` for a pattern that is not a valid glob.
 */
export function idFilterForGlob(pattern: string, prefix = ''): Document {
  const tokens = parseGlob(pattern);
  if (tokens.every((token) => token.kind === 'literal')) {
    return { _id: prefix + tokens.map((token) => token.text).join('') };
  }
  if (prefix === '' && tokens.length === 1 && tokens[0]!.kind === 'anyRun') return {};
  return { _id: { $regex: globToRegexSource(pattern, 'pcre', prefix) } };
}

/** The `_id` filter for every id starting with `prefix` (literal text, no wildcards). */
export function idFilterForPrefix(prefix: string): Document {
  return prefix === '' ? {} : { _id: { $regex: globToRegexSource('*', 'pcre', prefix) } };
}
