import { createHash } from 'node:crypto';
import type {
  ClaimRequest,
  CreateItemRequest,
  ExtendLeaseRequest,
  FindClaimableRequest,
  JsonObject,
  ListItemsRequest,
  ProcessChange,
  ProcessFeed,
  ProcessItem,
  ReleaseRequest,
  TransitionKind,
  TransitionRecord,
  TransitionRequest,
} from '@stowage/core';
import { StowageError } from '@stowage/core';
import { ProcessBackendBase, booleanOption, retentionOf } from '@stowage/core/adapter';
import { listeningHandle, storeDatabase, type StoreDatabase } from '../database.js';
import { decodeText, encodeText } from '../key-encoding.js';
import { postgresSettings, storeIdentity, type PostgresStoreOptions } from '../options.js';
import { clearExpiredInBatches, dateFromMs } from '../sql.js';
import type { ReleaseWakeups } from '../wakeups.js';
import { PostgresProcessFeed, parseFeedPosition, type FeedPosition } from './feed.js';
import { processStatements, type ItemRow } from './statements.js';

/*
 * The state-machine backend on PostgreSQL (see `ProcessBackend` in @stowage/core).
 *
 * Two tables: the items (one row per item: state, version, lease) and the transition log
 * (one row per transition, numbered by an identity sequence). Every transition is a single
 * statement that compare-and-sets the item row and appends the log row, so both commit
 * together or not at all, and notifies the listeners of the target state.
 *
 * The feed reads the log in (transaction id, sequence) order, and only rows of transactions
 * older than every transaction still running (`pg_snapshot_xmin`). Sequence numbers are
 * handed out before commit, so a plain `seq > cursor` reader could pass a number whose
 * transaction commits later and miss it; the transaction-id horizon closes that gap. The
 * resume token is "xid:seq" of the last row read.
 */

export interface PostgresProcessBackendOptions extends Omit<PostgresStoreOptions, 'table' | 'tableName'> {
  /** The items table (default `stowage_process_items`). */
  itemsTable?: string;
  /** The transition log (default `stowage_process_transitions`). */
  transitionsTable?: string;
  /**
   * Wake feeds with LISTEN/NOTIFY when an item enters a state (default true). Whether LISTEN
   * works is detected; without it (PgBouncer in transaction mode, PGlite's socket server)
   * feeds poll at the worker's `pollInterval`.
   */
  wakeups?: boolean;
  /**
   * How long the transition log keeps a row (default: for ever). With it, the background
   * sweeper (and {@link PostgresProcessBackend.clearHistory}) deletes transitions recorded more
   * than this many ms ago (server clock), in batches: `history(id)` then starts later. The log
   * is also the change feed: keep it longer than any feed may lag (a feed that lags more relies
   * on the engine's backlog scan to find items).
   */
  historyRetention?: number;
}

/** Creates a {@link ProcessBackend} on PostgreSQL. */
export function createPostgresProcessBackend(options: PostgresProcessBackendOptions | string): PostgresProcessBackend {
  return new PostgresProcessBackend(options);
}

/**
 * {@link ProcessBackend} on PostgreSQL: the transition log is the change feed, its
 * "xid:seq" the resume token, LISTEN/NOTIFY the wake-up (polling when LISTEN is unavailable).
 * Leases and timestamps use the server's clock (`statement_timestamp()`, see sql.ts). Each operation is one statement.
 */
export class PostgresProcessBackend extends ProcessBackendBase {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof processStatements>;
  readonly #channel: string;
  readonly #wakeups: ReleaseWakeups | undefined;
  /** The open feeds, closed before the database (see {@link listeningHandle}). */
  readonly #feeds: Set<PostgresProcessFeed>;

  constructor(options: PostgresProcessBackendOptions | string) {
    const { identity, db, items, transitions, channel, wakeups, historyRetention } = resolveProcessBackend(options);
    const feeds = new Set<PostgresProcessFeed>();
    super(identity, listeningHandle(db, wakeups, () => Promise.all([...feeds].map((feed) => feed.close()))), { historyRetention });
    this.#db = db;
    this.#sql = processStatements(items.sql, transitions.sql);
    this.#channel = channel;
    this.#wakeups = wakeups;
    this.#feeds = feeds;
    if (historyRetention !== undefined) db.sweep(transitions, { key: `process:history:${historyRetention}`, run: () => this.clearHistory() });
  }

  /** `clearHistory()` (the kit's), in batches on the log's `at` index, one statement each. */
  protected override _clearHistory(retention: number): Promise<number> {
    return clearExpiredInBatches(() => this.#db.run(this.#sql.clearHistory, [retention]), this.closeSignal);
  }

  /** The DDL this backend runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected override _bind(transaction: object): this {
    return new PostgresProcessBackend(this.#db.viewOptions(transaction)) as this;
  }

  protected async _createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    const { process, id, state, data } = request;
    const values = [process, encodeText(id), state, JSON.stringify(data), this.#channel, wakeupKey(process, state)];
    // Insert, log and notify; or, when the id exists, return the existing row. A concurrent
    // creation of the same id can hide from this statement's snapshot: then look again.
    for (;;) {
      const { rows } = await this.#db.run(this.#sql.createItem, values);
      if (rows.length > 0) return { item: toItem(rows[0]), created: rows[0].created === true };
    }
  }

  protected async _getItem(process: string, id: string): Promise<ProcessItem | null> {
    const { rows } = await this.#db.run(this.#sql.getItem, [process, encodeText(id)]);
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  protected async _listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    const { process, state, after, limit } = request;
    const from = after === undefined ? '' : encodeText(after);
    const { rows } =
      state === undefined
        ? await this.#db.run(this.#sql.listItems, [process, from, limit])
        : await this.#db.run(this.#sql.listItemsInState, [process, from, limit, state]);
    return rows.map(toItem);
  }

  protected async _history(process: string, id: string): Promise<TransitionRecord[]> {
    const { rows } = await this.#db.run(this.#sql.history, [process, encodeText(id)]);
    return rows.map(
      (row): TransitionRecord => ({
        itemId: decodeText(row.item_id),
        from: row.from_state,
        to: row.to_state,
        version: Number(row.version),
        kind: row.kind as TransitionKind,
        key: row.idempotency_key === null ? null : decodeText(row.idempotency_key),
        error: row.error,
        at: dateFromMs(row.at)!,
      }),
    );
  }

  protected async _openFeed(process: string, state: string, position: string | null): Promise<ProcessFeed> {
    if (this.#db.inTransaction) throw new StowageError('E_INVALID_OPTION', 'a feed reads on a connection of its own: open it on the backend, not on its view inside a transaction');
    let start: FeedPosition;
    let alreadyCommitted: string | null = null;
    if (position === null) {
      // "Now": from the oldest transaction still running, skipping what had already committed
      // by then (the snapshot); whatever is older is the engine's backlog scan.
      const { rows } = await this.#db.run(this.#sql.now);
      start = { xid: rows[0].xmin as string, seq: '0' };
      alreadyCommitted = rows[0].snapshot as string;
    } else {
      start = parseFeedPosition(position);
    }
    await this.handle.ready(); // LISTEN detection, so the feed knows whether to expect wake-ups
    const key = wakeupKey(process, state);
    const feed = new PostgresProcessFeed(
      {
        read: (after, limit) => this.call('process.feed.read', () => this.#readLog(process, state, after, limit, alreadyCommitted)),
        wakeup: (signal) => (this.#wakeups?.supported ? this.#wakeups.wait(key, signal).catch(() => undefined) : null),
        closeSignal: this.closeSignal,
        onClose: (closed) => this.#feeds.delete(closed),
      },
      start,
      position !== null,
    );
    this.#feeds.add(feed);
    return feed;
  }

  protected async _findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    const { process, state, includeUnclaimed, limit, unclaimedFor } = request;
    const { rows } = await this.#db.run(this.#sql.findClaimable, [process, state, includeUnclaimed, limit, unclaimedFor ?? null]);
    return rows.map((row) => ({ itemId: decodeText(row.id), state: row.state, version: Number(row.version), position: '' }));
  }

  protected async _claim(request: ClaimRequest): Promise<ProcessItem | null> {
    const { process, itemId, state, version, owner, lease } = request;
    const { rows } = await this.#db.run(this.#sql.claim, [process, encodeText(itemId), state, version, owner, lease]);
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  protected async _extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    const { process, itemId, version, owner, lease } = request;
    const { rowCount } = await this.#db.run(this.#sql.extendLease, [process, encodeText(itemId), version, owner, lease]);
    return rowCount === 1;
  }

  protected async _release(request: ReleaseRequest): Promise<boolean> {
    const { process, itemId, version, owner, delay, refundAttempt, error } = request;
    const values = [process, encodeText(itemId), version, owner, delay, refundAttempt, error ?? null];
    const { rowCount } = await this.#db.run(this.#sql.release, values);
    return rowCount === 1;
  }

  protected async _transition(request: TransitionRequest): Promise<ProcessItem | null> {
    const { process, itemId, from, to, version, data, kind, error, key } = request;
    const { rows } = await this.#db.run(this.#sql.transition, [
      process,
      encodeText(itemId),
      from,
      version,
      to,
      data === undefined ? null : JSON.stringify(data),
      kind,
      error ?? null,
      encodeText(key),
      this.#channel,
      wakeupKey(process, to),
    ]);
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  /** One page of the log after `after`, only of transactions older than every one still running. */
  async #readLog(process: string, state: string, after: FeedPosition, limit: number, alreadyCommitted: string | null): Promise<ProcessChange[]> {
    const { rows } = await this.#db.run(this.#sql.readLog, [process, state, after.xid, after.seq, limit, alreadyCommitted]);
    return rows.map((row) => ({ itemId: decodeText(row.item_id), state, version: Number(row.version), position: `${row.xid}:${row.seq}` }));
  }
}

/**
 * What the backend's constructor starts from (see `resolveStore`): its options checked, its two
 * tables, its database, its NOTIFY channel and, with `wakeups`, the listener on it.
 */
function resolveProcessBackend(options: PostgresProcessBackendOptions | string) {
  const { options: given, settings } = postgresSettings(options);
  const items = settings.table('processItems', given.itemsTable);
  const transitions = settings.table('processTransitions', given.transitionsTable);
  const listen = booleanOption(given.wakeups, 'wakeups', true);
  const historyRetention = retentionOf(given.historyRetention, 'historyRetention');
  const db = storeDatabase(given, settings, [['processItems', items], ['processTransitions', transitions]]);
  // A NOTIFY channel is an identifier of at most 63 bytes: name it after a hash of the table.
  const channel = `stowage_process_${createHash('sha256').update(items.key).digest('hex').slice(0, 24)}`;
  const wakeups = listen ? db.listen(channel) : undefined;
  return { identity: storeIdentity('PostgresProcessBackend', items, settings), db, items, transitions, channel, wakeups, historyRetention };
}

function wakeupKey(process: string, state: string): string {
  // Process and state names cannot contain "/".
  return `${process}/${state}`;
}

function toItem(row: ItemRow): ProcessItem {
  return {
    id: decodeText(row.id),
    state: row.state,
    data: JSON.parse(row.data) as JsonObject,
    version: Number(row.version),
    attempts: Number(row.attempts),
    lastError: row.last_error,
    leaseOwner: row.lease_owner,
    leaseUntil: dateFromMs(row.lease_until),
    createdAt: dateFromMs(row.created_at)!,
    updatedAt: dateFromMs(row.updated_at)!,
  };
}
