import { StowageError } from './errors.js';
import { assertValidKey, describeType } from './keys.js';
import {
  DEFAULT_LIST_LIMIT,
  MAX_LIST_LIMIT,
  type SnapshotListItem,
  type SnapshotPage,
  type SnapshotPageOptions,
} from './contracts/snapshots.js';

/** Validated list options; every snapshot store uses these so they agree on limits and cursors. */
export interface ParsedListOptions {
  prefix: string;
  limit: number;
  /** Position after which the page starts, in (updatedAt desc, id asc) order. */
  after: SnapshotCursor | null;
}

export interface SnapshotCursor {
  updatedAt: string;
  id: string;
}

export function parseListOptions(options: SnapshotPageOptions | undefined): ParsedListOptions {
  if (options !== undefined && (options === null || typeof options !== 'object')) {
    throw new StowageError('E_INVALID_OPTION', `list options must be an object, got ${describeType(options)}`);
  }
  const prefix = options?.prefix ?? '';
  if (typeof prefix !== 'string') {
    throw new StowageError('E_INVALID_OPTION', `prefix must be a string, got ${describeType(prefix)}`);
  }
  const limit = options?.limit ?? DEFAULT_LIST_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new StowageError('E_INVALID_OPTION', `limit must be an integer from 1 to ${MAX_LIST_LIMIT}`);
  }
  const after = options?.cursor === undefined ? null : decodeSnapshotCursor(options.cursor);
  return { prefix, limit, after };
}

export function encodeSnapshotCursor(item: SnapshotListItem): string {
  return Buffer.from(JSON.stringify([item.updatedAt, item.id])).toString('base64url');
}

export function decodeSnapshotCursor(cursor: unknown): SnapshotCursor {
  if (typeof cursor === 'string') {
    try {
      const decoded: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
      if (
        Array.isArray(decoded) &&
        decoded.length === 2 &&
        typeof decoded[0] === 'string' &&
        !Number.isNaN(Date.parse(decoded[0])) &&
        typeof decoded[1] === 'string'
      ) {
        return { updatedAt: decoded[0], id: decoded[1] };
      }
    } catch {
      // reported below
    }
  }
  throw new StowageError('E_INVALID_OPTION', 'cursor is not a cursor returned by listPage');
}

/** Builds a page from up to `limit + 1` rows already sorted newest first. */
export function toSnapshotPage(rows: SnapshotListItem[], limit: number): SnapshotPage {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, nextCursor: rows.length > limit && last ? encodeSnapshotCursor(last) : null };
}

/** Newest first, ties by id ascending: the one order every snapshot store lists in. */
export function compareSnapshotItems(a: SnapshotListItem, b: SnapshotListItem): number {
  const byTime = Date.parse(b.updatedAt) - Date.parse(a.updatedAt);
  if (byTime !== 0) return byTime;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** True when `item` comes after `cursor` in list order. */
export function isAfterCursor(item: SnapshotListItem, cursor: SnapshotCursor): boolean {
  return compareSnapshotItems(item, cursor) > 0;
}

/** Throws `E_INVALID_VALUE` unless `snapshot` is a plain (non-array) object. */
export function assertSnapshotObject(snapshot: unknown): asserts snapshot is object {
  if (snapshot === null || typeof snapshot !== 'object' || Array.isArray(snapshot)) {
    throw new StowageError('E_INVALID_VALUE', `snapshot must be an object, got ${describeType(snapshot)}`);
  }
}

export function assertValidSnapshotId(id: unknown): asserts id is string {
  assertValidKey(id, 'snapshot id');
}

export function assertExpectedVersion(version: unknown): asserts version is number | null | undefined {
  if (version === undefined || version === null) return;
  if (!Number.isSafeInteger(version) || (version as number) < 1) {
    throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a positive integer or null');
  }
}
