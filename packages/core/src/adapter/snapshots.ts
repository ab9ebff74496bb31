import type { ScanOptions } from '../contracts/common.js';
import {
  DEFAULT_LIST_LIMIT,
  DEFAULT_WORKFLOW_LOCK_TTL,
  MAX_LIST_LIMIT,
  type SnapshotListItem,
  type SnapshotListOptions,
  type SnapshotPage,
  type SnapshotPageOptions,
  type SnapshotSaveOptions,
  type ResumeState,
  type SnapshotStore,
  type VersionedSnapshot,
  type WorkflowLock,
  type WorkflowSnapshot,
} from '../contracts/snapshots.js';
import { StowageError } from '../errors.js';
import { decodeValue, jsonCodec, stringifyLikeJson } from '../json.js';
import { assertValidDuration, assertValidKey, assertValidOwner, compareKeys, describeType, fitKey } from '../keys.js';
import { newOwnerToken, type LeaseDriver } from './lock-support.js';
import { deserializeResumeState, isResumeState, isSerializedResumeState, serializeResumeState } from './resume-state.js';
import { assertExpectedVersion, assertOptionsObject, assertValidPrefix, isStorableTime, pageSizeOf } from './options.js';
import type { StoreIdentity } from '../diagnostics.js';
import { finishedAfterOf } from './retention.js';
import { StoreBase, type StoreHandle } from './store.js';

/** A snapshot as a backend returns it. */
export interface StoredSnapshot {
  /** The JSON text as saved, or the value a driver already parsed from it. */
  document: string | object;
  version: number;
  updatedAt: Date;
}

/** One row of a listing, as a backend returns it. */
export interface StoredSnapshotItem {
  id: string;
  updatedAt: Date;
}

/** Where a page starts: after this item in (updatedAt desc, id asc) order. */
export interface SnapshotCursor {
  updatedAt: Date;
  id: string;
}

export interface SnapshotStoreBaseOptions {
  /** The store's namespace (validated here; the backend keeps namespaces apart). */
  prefix?: string;
  /** Makes the store awaitly's `WorkflowLock` on these leases. */
  workflowLeases?: LeaseDriver;
  /** Lease of `tryAcquire` without `ttlMs` (default 30 s). */
  lockTtl?: number;
  /**
   * `snapshotRetention`, as the store was given it (`{ finishedAfter: ms }`, validated here):
   * snapshots of finished workflows not saved for that long are deleted by `clearFinished()`.
   */
  snapshotRetention?: unknown;
}

/**
 * The whole {@link SnapshotStore} (and awaitly `WorkflowLock`) behaviour over a few backend
 * operations: argument checks, JSON encoding (once, here), version checks, list options,
 * cursors and pages. Ids reach the backend without the prefix; the backend keeps each
 * prefix's snapshots apart from every other's.
 */
export abstract class SnapshotStoreBase<TSnapshot extends object = WorkflowSnapshot>
  extends StoreBase
  implements SnapshotStore<TSnapshot>
{
  /** This store's namespace ('' for none). */
  protected readonly prefix: string;
  /** `snapshotRetention.finishedAfter`, when given: ms after its last save that a finished workflow's snapshot goes. */
  protected readonly finishedAfter: number | undefined;

  /*
   * awaitly's `WorkflowLock`, present only on a store created with a lock: `durable.run`
   * takes the lock when `tryAcquire` and `release` are functions, so a store without a lock
   * must not have them. A locking subclass redeclares them as required.
   */
  declare readonly tryAcquire?: WorkflowLock['tryAcquire'];
  declare readonly release?: WorkflowLock['release'];
  declare readonly renew?: WorkflowLock['renew'];
  /** Deletes expired workflow leases; returns how many (only with a lock). */
  declare readonly clearExpiredLocks?: () => Promise<number>;

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: SnapshotStoreBaseOptions = {}) {
    super(identity, handle, 'snapshots');
    const prefix = options.prefix === undefined ? '' : options.prefix;
    assertValidPrefix(prefix);
    this.prefix = prefix;
    this.finishedAfter = finishedAfterOf(options.snapshotRetention);
    const lockTtl = options.lockTtl ?? DEFAULT_WORKFLOW_LOCK_TTL;
    assertValidDuration(lockTtl, 'lock.ttl');
    if (options.workflowLeases) Object.assign(this, this.#workflowLock(options.workflowLeases, lockTtl));
  }

  /**
   * Deletes this store's snapshots of finished workflows (`execution.status` one of
   * `FINISHED_STATUSES`) not saved for `snapshotRetention.finishedAfter` ms, in batches (a
   * `close()` meanwhile stops it between batches); how many. `E_INVALID_OPTION` without that
   * option. The background sweeper runs it where the backend has one.
   */
  clearFinished(): Promise<number> {
    return this.call('snapshots.clearFinished', () => {
      const finishedAfter = this.finishedAfter;
      if (finishedAfter === undefined || !this._clearFinished) {
        throw new StowageError('E_INVALID_OPTION', 'clearFinished needs the snapshotRetention: { finishedAfter } option');
      }
      return this._clearFinished(finishedAfter);
    });
  }

  save(id: string, snapshot: TSnapshot | ResumeState, options?: SnapshotSaveOptions): Promise<void> {
    return this.call('snapshots.save', async () => {
      id = snapshotKey(id, 'snapshot id');
      const document = encodeSnapshot(snapshot);
      assertOptionsObject(options, 'save options');
      const expected = options?.expectedVersion;
      assertExpectedVersion(expected);
      if (!(await this._save(id, document, expected))) {
        throw new StowageError('E_VERSION_CONFLICT', `snapshot "${id}" is not at version ${expected ?? '(absent)'}`);
      }
    }, id);
  }

  async load(id: string): Promise<TSnapshot | null> {
    return (await this.loadVersioned(id))?.snapshot ?? null;
  }

  loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null> {
    return this.call('snapshots.load', async () => {
      id = snapshotKey(id, 'snapshot id');
      const stored = await this._load(id);
      if (stored === null) return null;
      const document = typeof stored.document === 'string' ? decodeValue(jsonCodec, stored.document, `snapshot "${id}"`) : stored.document;
      if (document === null || typeof document !== 'object') {
        throw new StowageError('E_INVALID_VALUE', `snapshot "${id}" is stored as ${describeType(document)}, not as an object (written by other code?)`);
      }
      const snapshot = (isSerializedResumeState(document) ? deserializeResumeState(document) : document) as TSnapshot;
      return { snapshot, version: stored.version, updatedAt: stored.updatedAt.toISOString() };
    }, id);
  }

  async loadResumeState(id: string): Promise<ResumeState | undefined> {
    const loaded: unknown = await this.load(id);
    return isResumeState(loaded) ? loaded : undefined;
  }

  delete(id: string): Promise<void> {
    return this.call('snapshots.delete', () => {
      id = snapshotKey(id, 'snapshot id');
      return this._delete(id);
    }, id);
  }

  async list(options?: SnapshotListOptions): Promise<SnapshotListItem[]> {
    assertOptionsObject(options, 'list options');
    return (await this.listPage({ prefix: options?.prefix, limit: options?.limit })).items;
  }

  listPage(options?: SnapshotPageOptions): Promise<SnapshotPage> {
    return this.call('snapshots.list', async () => {
      const { prefix, limit, after } = parseListOptions(options);
      const rows = await this._list(prefix, after, limit + 1);
      const items = rows.slice(0, limit).map((row) => ({ id: row.id, updatedAt: row.updatedAt.toISOString() }));
      const last = rows.length > limit ? rows[limit - 1] : undefined;
      return { items, nextCursor: last ? encodeSnapshotCursor(last) : null };
    });
  }

  #workflowLock(leases: LeaseDriver, defaultTtl: number): WorkflowLock & { clearExpiredLocks(): Promise<number> } {
    const ttlOf = (options: { ttlMs?: number } | undefined) => {
      assertOptionsObject(options);
      const ttl = options?.ttlMs ?? defaultTtl;
      assertValidDuration(ttl, 'ttlMs');
      return ttl;
    };
    // Workflow ids of different prefixes never share a lease: a prefix holds no U+0000 (see
    // assertValidPrefix), so the first U+0000 of a prefixed lease key ends the prefix.
    const leaseKey = (id: string) => (this.prefix === '' ? id : `${this.prefix}\u0000${id}`);
    return {
      tryAcquire: (id, options) =>
        this.call('snapshots.tryAcquire', async () => {
          id = snapshotKey(id, 'workflow id');
          const ownerToken = newOwnerToken();
          return (await leases.acquire(leaseKey(id), ownerToken, ttlOf(options))) === null ? null : { ownerToken };
        }, id),
      release: (id, ownerToken) =>
        this.call('snapshots.release', async () => {
          id = snapshotKey(id, 'workflow id');
          assertValidOwner(ownerToken, 'ownerToken');
          await leases.release(leaseKey(id), ownerToken);
        }, id),
      renew: (id, ownerToken, options) =>
        this.call('snapshots.renew', async () => {
          id = snapshotKey(id, 'workflow id');
          assertValidOwner(ownerToken, 'ownerToken');
          return (await leases.extend(leaseKey(id), ownerToken, ttlOf(options))) !== null;
        }, id),
      clearExpiredLocks: () => this.call('snapshots.clearExpiredLocks', () => leases.clearExpired()),
    };
  }

  /** Newest first, one round trip per `pageSize` snapshots (default 1000), on the same index as `listPage`. */
  async *scan(options?: { prefix?: string } & ScanOptions): AsyncIterable<SnapshotListItem> {
    const { prefix, pageSize } = await this.call('snapshots.scan', () => {
      const { prefix } = parseListOptions({ prefix: options?.prefix });
      return { prefix, pageSize: pageSizeOf(options) };
    });
    for (let after: SnapshotCursor | null = null; ; ) {
      const rows: StoredSnapshotItem[] = await this.call('snapshots.scan', () => this._list(prefix, after, pageSize));
      for (const row of rows) yield { id: row.id, updatedAt: row.updatedAt.toISOString() };
      if (rows.length < pageSize) return;
      after = rows.at(-1)!;
    }
  }

  // --- backend operations -------------------------------------------------------------

  /**
   * Inserts or replaces `document` (JSON text of an object). With `expectedVersion` a number,
   * only while the stored version is that; with `null`, only when no snapshot exists. False
   * for a conflict (nothing written). Every save gives the snapshot a higher version, never
   * one it had before, also after delete.
   */
  protected abstract _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean>;

  /** Deletes finished snapshots of this prefix not saved for `finishedAfter` ms (see {@link clearFinished}); a backend with retention implements it. */
  protected _clearFinished?(finishedAfter: number): Promise<number>;

  protected abstract _load(id: string): Promise<StoredSnapshot | null>;

  protected abstract _delete(id: string): Promise<void>;

  /**
   * Up to `limit` snapshots whose id starts with `idPrefix` (literal), newest first, ties by
   * id ascending (code-point order), after `after` when given. Must use an index: a page's
   * cost may not grow with the table.
   */
  protected abstract _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]>;
}

/**
 * JSON text of a snapshot, as awaitly's own adapters store it: `JSON.stringify` (see
 * {@link stringifyLikeJson}: a step that returned `undefined`, an object with an `undefined`
 * member, a `Date` or `NaN` is saved, as JSON keeps it), never refused for what is inside.
 * awaitly's `durable.run` swallows a failed save (`persist_error`), so a refusal here would
 * silently re-run completed steps after a crash. An awaitly `ResumeState` is stored in
 * awaitly's JSON form. Only a snapshot that is not an object is `E_INVALID_VALUE`.
 */
export function encodeSnapshot(snapshot: unknown): string {
  if (snapshot === null || typeof snapshot !== 'object' || Array.isArray(snapshot)) {
    throw new StowageError('E_INVALID_VALUE', `snapshot must be an object, got ${describeType(snapshot)}`);
  }
  let text: string | undefined;
  try {
    text = stringifyLikeJson(isResumeState(snapshot) ? serializeResumeState(snapshot) : snapshot);
  } catch (error) {
    throw new StowageError('E_INVALID_VALUE', 'snapshot could not be encoded (a toJSON method threw)', { cause: error });
  }
  if (text === undefined || !text.startsWith('{')) {
    throw new StowageError('E_INVALID_VALUE', 'snapshot must encode as a JSON object (its toJSON returned something else)');
  }
  return text;
}

/** Validated list options; every snapshot store uses these so they agree on limits and cursors. */
export interface ParsedListOptions {
  prefix: string;
  limit: number;
  after: SnapshotCursor | null;
}

export function parseListOptions(options: SnapshotPageOptions | undefined): ParsedListOptions {
  assertOptionsObject(options, 'list options');
  const prefix = options?.prefix ?? '';
  if (typeof prefix !== 'string' || !prefix.isWellFormed()) {
    throw new StowageError('E_INVALID_OPTION', `prefix must be a well-formed string, got ${describeType(prefix)}`);
  }
  const limit = options?.limit ?? DEFAULT_LIST_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new StowageError('E_INVALID_OPTION', `limit must be an integer from 1 to ${MAX_LIST_LIMIT}`);
  }
  const after = options?.cursor === undefined ? null : decodeSnapshotCursor(options.cursor);
  return { prefix, limit, after };
}

/** Opaque to callers: base64url of `[updatedAt epoch ms, id]`. */
export function encodeSnapshotCursor(item: StoredSnapshotItem): string {
  return Buffer.from(JSON.stringify([item.updatedAt.getTime(), item.id])).toString('base64url');
}

/** The cursor `listPage` returned, or `E_INVALID_OPTION` for anything else (a forged cursor never reaches the database). */
export function decodeSnapshotCursor(cursor: unknown): SnapshotCursor {
  if (typeof cursor === 'string' && cursor.length <= 8192) {
    try {
      const decoded: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
      if (Array.isArray(decoded) && decoded.length === 2) {
        const [ms, id] = decoded as [unknown, unknown];
        const updatedAt = new Date(typeof ms === 'number' && Number.isSafeInteger(ms) ? ms : Number.NaN);
        if (isStorableTime(updatedAt) && typeof id === 'string' && id.isWellFormed()) return { updatedAt, id };
      }
    } catch {
      // reported below
    }
  }
  throw new StowageError('E_INVALID_OPTION', 'cursor is not a cursor returned by listPage');
}

/** Newest first, ties by id ascending: the one order every snapshot store lists in. */
export function compareSnapshotItems(a: StoredSnapshotItem, b: StoredSnapshotItem): number {
  const byTime = b.updatedAt.getTime() - a.updatedAt.getTime();
  return byTime !== 0 ? byTime : compareKeys(a.id, b.id);
}

/** True when `item` comes after `cursor` in list order. */
export function isAfterCursor(item: StoredSnapshotItem, cursor: SnapshotCursor): boolean {
  return compareSnapshotItems(item, cursor) > 0;
}

/**
 * A snapshot or workflow id as stored: awaitly's adapters take ids of any length (its
 * `durable.run` keeps an idempotency record under `idem:<key>`) and awaitly swallows a failed
 * save, so an id over 1024 bytes is stored in its fitted form (see `fitKey`) instead of being
 * refused; anything else that is not a valid key is `E_INVALID_KEY`.
 */
function snapshotKey(id: unknown, what: string): string {
  const key = fitKey(id);
  assertValidKey(key, what);
  return key;
}
