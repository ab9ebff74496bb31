/*
 * SQL fragments the stores share. Times are decided by the server, never sent by the client,
 * so a client with a wrong clock behaves correctly. Every statement reads the time as
 * `statement_timestamp()`, never `now()`: `now()` is the start of the transaction, so a ttl
 * written late in a caller's transaction (a view, `runOnce`) would count from its `BEGIN` and
 * could be expired at the commit. Unlike `clock_timestamp()` it is stable within a statement,
 * so every row of a batch gets one time and an index on the expiry column applies.
 */

import { clearInBatches } from '@stowage/core/adapter';

/** Interval SQL for `$n` milliseconds of server time; NULL stays NULL (no expiry). */
export function msInterval(param: string): string {
  return `(${param}::bigint * interval '1 millisecond')`;
}

/** `WHERE` fragment: a row is visible while it has not expired (server clock). */
export const LIVE = '(expires_at IS NULL OR expires_at > statement_timestamp())';

/** The server's time of a write, at the millisecond precision of a JavaScript `Date`. */
export const NOW_MS = `date_trunc('milliseconds', statement_timestamp())`;

/**
 * SQL for a timestamptz as epoch milliseconds (a float8). Reading times this way keeps them
 * exact and independent of the timestamp type parsers a pool passed in may have installed.
 */
export function epochMs(column: string): string {
  return `(extract(epoch from ${column}) * 1000)::float8`;
}

/** A `Date` from an {@link epochMs} column; `null` stays `null`. */
export function dateFromMs(value: number | string | null): Date | null {
  return value === null ? null : new Date(Number(value));
}

/** SQL for epoch milliseconds (parameter) as a timestamptz. */
export function timestampFromMs(param: string): string {
  return `(timestamptz 'epoch' + ${param}::float8 * interval '1 millisecond')`;
}

/** `nextval` of a sequence given by its quoted, qualified name (a `TableName.derived` result). */
export function nextval(sequence: string): string {
  return `nextval('${sequence.replace(/'/g, "''")}')`;
}

/**
 * Rows removed per statement by `clearExpired()`: each batch is its own short transaction, so a
 * cleanup of millions of expired rows never holds one huge transaction (nor its row locks).
 */
export const CLEAR_EXPIRED_BATCH = 5000;

/**
 * A `DELETE` of at most {@link CLEAR_EXPIRED_BATCH} expired rows of `table` (those matching
 * `expired`, which an index serves), one statement. The rows are picked and locked with
 * `FOR UPDATE SKIP LOCKED`, so cleanup never waits for a row another statement holds (it can
 * neither block a writer nor deadlock with one) and leaves it to the next batch; the outer
 * condition is checked again on the row it deletes.
 *
 * `appendOnly`: a table whose rows nobody updates or locks (the process transition log), so
 * there is no writer to step around. Its rows are picked without a lock: `FOR UPDATE` needs
 * the `UPDATE` privilege, which a role of `grantsSql()` does not have on such a table. Two
 * cleanups of the same rows at once delete them in TID order (a TID scan), and the second
 * skips the rows the first deleted.
 */
export function clearExpiredBatchSql(table: string, expired: string, { appendOnly = false }: { appendOnly?: boolean } = {}): string {
  return `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(
      SELECT ctid FROM ${table} WHERE ${expired} LIMIT ${CLEAR_EXPIRED_BATCH}${appendOnly ? '' : ' FOR UPDATE SKIP LOCKED'}
    )) AND ${expired}`;
}

/**
 * Runs {@link clearExpiredBatchSql} batches until one removes fewer than a full batch, or until
 * `stop` aborts (the store's `close()`: a backlog of millions of rows must not hold a shutdown
 * for minutes, so the batch in flight is the last); returns how many rows went. Used by
 * `clearExpired()` and so by the `cleanupInterval` timer. (Lease tables pass no `stop`: they
 * hold one row per lock key, never a backlog that outlasts a shutdown.)
 */
export function clearExpiredInBatches(run: () => Promise<{ rowCount: number | null }>, stop?: AbortSignal): Promise<number> {
  return clearInBatches(async () => (await run()).rowCount ?? 0, CLEAR_EXPIRED_BATCH, stop);
}

/**
 * Bounds of the stored keys that start with the stored form `storedPrefix`: `lo <= key < hi`
 * in `COLLATE "C"`, which is byte order of UTF-8 and so code point order. A listing narrows
 * by this range rather than by `key LIKE $n`: a prepared statement's generic plan cannot turn
 * `LIKE $n` into an index range (the pattern is unknown when it is planned) and falls back to
 * a sequential scan, whereas a range on the key column is an index range on every execution.
 *
 * `hi` is `storedPrefix` with its last code point incremented (code points that cannot grow
 * further are dropped first). Only a prefix made of U+10FFFF alone has no such string; then
 * `hi` is {@link ABOVE_EVERY_KEY}.
 */
export function keyRange(storedPrefix: string): { lo: string; hi: string } {
  const codePoints = Array.from(storedPrefix, (char) => char.codePointAt(0)!);
  while (codePoints.length > 0 && codePoints.at(-1) === MAX_CODE_POINT) codePoints.pop();
  if (codePoints.length === 0) return { lo: storedPrefix, hi: ABOVE_EVERY_KEY };
  const next = codePoints.pop()! + 1;
  // Surrogates are not characters (text cannot hold them): the code point after U+D7FF is U+E000.
  codePoints.push(next >= 0xd800 && next <= 0xdfff ? 0xe000 : next);
  return { lo: storedPrefix, hi: String.fromCodePoint(...codePoints) };
}

const MAX_CODE_POINT = 0x10ffff;

/**
 * Sorts after every stored key: keys have at most 1024 UTF-8 bytes, so at most 256 leading
 * U+10FFFF (4 bytes each), and the stored form's escape only touches U+0000 and U+0001.
 */
export const ABOVE_EVERY_KEY = String.fromCodePoint(MAX_CODE_POINT).repeat(257);

/** SQL: `column` within `[lo, hi)` (see {@link keyRange}). */
export function inKeyRange(column: string, lo: string, hi: string): string {
  return `${column} >= ${lo} AND ${column} < ${hi}`;
}
