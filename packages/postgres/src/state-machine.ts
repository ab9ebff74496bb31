import { createHash } from 'node:crypto';
import {
  StowageError,
  assertClaimRequest,
  assertCreateItemRequest,
  assertFindClaimableRequest,
  assertItemId,
  assertListItemsRequest,
  assertProcessName,
  assertReleaseRequest,
  assertStateName,
  assertTransitionRequest,
  sleep,
  type Capabilities,
  type ClaimRequest,
  type CreateItemRequest,
  type ExtendLeaseRequest,
  type FindClaimableRequest,
  type JsonObject,
  type ListItemsRequest,
  type ProcessBackend,
  type ProcessChange,
  type ProcessFeed,
  type ProcessFeedReadOptions,
  type ProcessItem,
  type ReleaseRequest,
  type TransitionKind,
  type TransitionRecord,
  type TransitionRequest,
} from '@stowage/core';
import { PostgresConnection } from './connection.js';
import { decodeText, encodeText } from './key-encoding.js';
import { TableName, ensureSchema, quoteIdentifier } from './schema.js';
import {
  POSTGRES_CAPABILITIES,
  PostgresStoreBase,
  autoCreateOption,
  dateFromMs,
  epochMs,
  msInterval,
  type PostgresStoreOptions,
} from './store.js';
import { ReleaseWakeups } from './wakeups.js';

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

export const DEFAULT_PROCESS_ITEMS_TABLE = 'stowage_process_items';
export const DEFAULT_PROCESS_TRANSITIONS_TABLE = 'stowage_process_transitions';

export interface PostgresProcessBackendOptions extends Omit<PostgresStoreOptions, 'table' | 'cleanupInterval'> {
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
}

export interface ProcessSchemaSqlOptions {
  schema?: string;
  itemsTable?: string;
  transitionsTable?: string;
}

/** The DDL of the two process tables, one idempotent statement each. */
export function processTablesDdl(items: TableName, transitions: TableName): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${items.sql} (
  process TEXT COLLATE "C" NOT NULL,
  id TEXT COLLATE "C" NOT NULL,
  state TEXT COLLATE "C" NOT NULL,
  data JSON NOT NULL,
  version BIGINT NOT NULL DEFAULT 1,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  lease_owner TEXT,
  lease_until TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (process, id)
)`,
    `CREATE INDEX IF NOT EXISTS ${items.derivedUnqualified('claimable_idx')} ON ${items.sql} (process, state, lease_until)`,
    `CREATE TABLE IF NOT EXISTS ${transitions.sql} (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid XID8 NOT NULL DEFAULT pg_current_xact_id(),
  process TEXT COLLATE "C" NOT NULL,
  item_id TEXT COLLATE "C" NOT NULL,
  from_state TEXT COLLATE "C",
  to_state TEXT COLLATE "C" NOT NULL,
  version BIGINT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('create', 'advance', 'dead-letter')),
  idempotency_key TEXT,
  error TEXT,
  at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT ${transitions.derivedUnqualified('item_version_key')} UNIQUE (process, item_id, version)
)`,
    `CREATE INDEX IF NOT EXISTS ${transitions.derivedUnqualified('feed_idx')} ON ${transitions.sql} (process, to_state, xid, seq)`,
  ];
}

/** The exact DDL `createPostgresProcessBackend` runs with `autoCreate` on, for migration tools. */
export function processSchemaSql(options: ProcessSchemaSqlOptions = {}): string {
  const { items, transitions } = processTableNames(options);
  const statements = options.schema === undefined ? [] : [`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(options.schema)}`];
  statements.push(...processTablesDdl(items, transitions));
  return statements.map((statement) => `${statement};\n`).join('\n');
}

function processTableNames(options: ProcessSchemaSqlOptions): { items: TableName; transitions: TableName } {
  return {
    items: new TableName(options.itemsTable ?? DEFAULT_PROCESS_ITEMS_TABLE, options.schema),
    transitions: new TableName(options.transitionsTable ?? DEFAULT_PROCESS_TRANSITIONS_TABLE, options.schema),
  };
}

const ITEM_COLUMNS = `id, state, data::text AS data, version, attempts, last_error, lease_owner,
  ${epochMs('lease_until')} AS lease_until, ${epochMs('created_at')} AS created_at, ${epochMs('updated_at')} AS updated_at`;

interface ItemRow {
  id: string;
  state: string;
  data: string;
  version: string | number;
  attempts: number;
  last_error: string | null;
  lease_owner: string | null;
  lease_until: number | null;
  created_at: number;
  updated_at: number;
}

/** Creates a {@link ProcessBackend} on PostgreSQL. */
export function createPostgresProcessBackend(options: PostgresProcessBackendOptions | string): PostgresProcessBackend {
  return new PostgresProcessBackend(options);
}

/**
 * {@link ProcessBackend} on PostgreSQL: the transition log is the change feed, its
 * "xid:seq" the resume token, LISTEN/NOTIFY the wake-up (polling when LISTEN is unavailable).
 * Leases and timestamps use the server's clock (`now()`). Each call is one statement.
 */
export class PostgresProcessBackend extends PostgresStoreBase implements ProcessBackend {
  readonly #items: string;
  readonly #transitions: string;
  readonly #ddl: string[];
  readonly #autoCreate: boolean;
  readonly #channel: string;
  readonly #wakeups: ReleaseWakeups | undefined;
  readonly #feeds = new Set<PostgresProcessFeed>();

  constructor(options: PostgresProcessBackendOptions | string) {
    const settings = typeof options === 'string' ? { url: options } : options;
    if (settings === null || typeof settings !== 'object') {
      throw new StowageError('E_INVALID_OPTION', 'options must be a URL or an object');
    }
    const { items, transitions } = processTableNames(settings);
    const autoCreate = autoCreateOption(settings);
    super('PostgresProcessBackend', { connection: PostgresConnection.from(settings), ownsConnection: true, tables: [], autoCreate });
    this.#items = items.sql;
    this.#transitions = transitions.sql;
    this.#autoCreate = autoCreate;
    this.#ddl = [...(settings.schema === undefined ? [] : [`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(settings.schema)}`]), ...processTablesDdl(items, transitions)];
    // A NOTIFY channel is an identifier of at most 63 bytes: name it after a hash of the table.
    this.#channel = `stowage_process_${createHash('sha256').update(items.key).digest('hex').slice(0, 24)}`;
    const wakeups = settings.wakeups ?? true;
    if (typeof wakeups !== 'boolean') throw new StowageError('E_INVALID_OPTION', 'wakeups must be a boolean');
    this.#wakeups = wakeups ? new ReleaseWakeups(this.connection.pool, this.#channel) : undefined;
  }

  /** `changeFeed` and `wakeups` are true once LISTEN was seen to work (after {@link ready}). */
  override get capabilities(): Capabilities {
    const listening = this.#wakeups?.supported ?? false;
    return { ...POSTGRES_CAPABILITIES, changeFeed: listening, wakeups: listening };
  }

  override schemaSql(): string {
    return this.#ddl.map((statement) => `${statement};\n`).join('\n');
  }

  /** Creates the tables on first use (unless `autoCreate: false`), then detects LISTEN support. */
  override async ready(): Promise<void> {
    await super.ready();
    await this.#wakeups?.start();
  }

  protected override prepare(): Promise<void> {
    return this.#autoCreate ? ensureSchema(this.connection, this.#ddl) : Promise.resolve();
  }

  async createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    this.assertOpen();
    assertCreateItemRequest(request);
    const values = [request.process, encodeText(request.id), request.state, JSON.stringify(request.data), this.#channel, wakeupKey(request.process, request.state)];
    // Insert, log and notify; or, when the id exists, return the existing row. A concurrent
    // creation of the same id can hide from this statement's snapshot: then look again.
    for (;;) {
      const { rows } = await this.run(
        `WITH inserted AS (
           INSERT INTO ${this.#items} (process, id, state, data) VALUES ($1, $2, $3, $4::json)
           ON CONFLICT (process, id) DO NOTHING
           RETURNING *
         ), logged AS (
           INSERT INTO ${this.#transitions} (process, item_id, from_state, to_state, version, kind)
           SELECT process, id, NULL, state, 1, 'create' FROM inserted
         )
         SELECT true AS created, pg_notify($5, $6)::text AS notified, ${ITEM_COLUMNS} FROM inserted
         UNION ALL
         SELECT false, NULL, ${ITEM_COLUMNS} FROM ${this.#items}
         WHERE process = $1 AND id = $2 AND NOT EXISTS (SELECT 1 FROM inserted)`,
        values,
      );
      if (rows.length > 0) return { item: toItem(rows[0]), created: rows[0].created === true };
    }
  }

  async getItem(process: string, id: string): Promise<ProcessItem | null> {
    this.assertOpen();
    assertProcessName(process);
    assertItemId(id);
    const { rows } = await this.run(`SELECT ${ITEM_COLUMNS} FROM ${this.#items} WHERE process = $1 AND id = $2`, [process, encodeText(id)]);
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  async listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    this.assertOpen();
    assertListItemsRequest(request);
    const { rows } = await this.run(
      `SELECT ${ITEM_COLUMNS} FROM ${this.#items}
       WHERE process = $1 AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR id > $3)
       ORDER BY id LIMIT $4`,
      [request.process, request.state ?? null, request.after === undefined ? null : encodeText(request.after), request.limit],
    );
    return rows.map(toItem);
  }

  async history(process: string, id: string): Promise<TransitionRecord[]> {
    this.assertOpen();
    assertProcessName(process);
    assertItemId(id);
    const { rows } = await this.run(
      `SELECT item_id, from_state, to_state, version, kind, idempotency_key, error, ${epochMs('at')} AS at
       FROM ${this.#transitions} WHERE process = $1 AND item_id = $2 ORDER BY version`,
      [process, encodeText(id)],
    );
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

  async openFeed(process: string, state: string, position: string | null): Promise<ProcessFeed> {
    this.assertOpen();
    assertProcessName(process);
    assertStateName(state);
    let start: FeedPosition;
    let alreadyCommitted: string | null = null;
    if (position === null) {
      // "Now": from the oldest transaction still running, skipping what had already committed
      // by then (the snapshot); whatever is older is the engine's backlog scan.
      const { rows } = await this.run(
        'SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_current_snapshot()::text AS snapshot',
      );
      start = { xid: rows[0].xmin as string, seq: '0' };
      alreadyCommitted = rows[0].snapshot as string;
    } else {
      start = parsePosition(position);
    }
    await this.ready(); // LISTEN detection, so the feed knows whether to expect wake-ups
    const feed = new PostgresProcessFeed(this, process, state, start, position !== null, alreadyCommitted);
    this.#feeds.add(feed);
    return feed;
  }

  /** @internal One page of the log after `after`, for {@link PostgresProcessFeed}. */
  async readLog(
    process: string,
    state: string,
    after: FeedPosition,
    limit: number,
    alreadyCommitted: string | null,
  ): Promise<ProcessChange[]> {
    this.assertOpen();
    const { rows } = await this.run(
      `SELECT xid::text AS xid, seq::text AS seq, item_id, version FROM ${this.#transitions}
       WHERE process = $1 AND to_state = $2 AND (xid, seq) > ($3::xid8, $4::bigint)
         AND xid < pg_snapshot_xmin(pg_current_snapshot())
         AND ($6::pg_snapshot IS NULL OR NOT pg_visible_in_snapshot(xid, $6::pg_snapshot))
       ORDER BY xid, seq LIMIT $5`,
      [process, state, after.xid, after.seq, limit, alreadyCommitted],
    );
    return rows.map((row) => ({ itemId: decodeText(row.item_id), state, version: Number(row.version), position: `${row.xid}:${row.seq}` }));
  }

  /** @internal Resolves on a NOTIFY for the state, or at once when wake-ups are off (the caller sleeps instead). */
  wakeup(process: string, state: string, signal: AbortSignal): Promise<void> | null {
    if (!this.#wakeups?.supported) return null;
    return this.#wakeups.wait(wakeupKey(process, state), signal).catch(() => undefined);
  }

  /** @internal */
  forgetFeed(feed: PostgresProcessFeed): void {
    this.#feeds.delete(feed);
  }

  async findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    this.assertOpen();
    assertFindClaimableRequest(request);
    const { rows } = await this.run(
      `SELECT id, state, version FROM ${this.#items}
       WHERE process = $1 AND state = $2
         AND (lease_until <= now() OR (lease_owner IS NULL AND ($3 OR updated_at <= now() - ${msInterval('$5')})))
       ORDER BY lease_until NULLS FIRST, id LIMIT $4`,
      [request.process, request.state, request.includeUnclaimed, request.limit, request.unclaimedFor ?? null],
    );
    return rows.map((row) => ({ itemId: decodeText(row.id), state: row.state, version: Number(row.version), position: '' }));
  }

  async claim(request: ClaimRequest): Promise<ProcessItem | null> {
    this.assertOpen();
    assertClaimRequest(request);
    const { rows } = await this.run(
      `UPDATE ${this.#items} SET lease_owner = $5, lease_until = now() + ${msInterval('$6')}, attempts = attempts + 1
       WHERE process = $1 AND id = $2 AND state = $3 AND version = $4 AND (lease_until IS NULL OR lease_until <= now())
       RETURNING ${ITEM_COLUMNS}`,
      [request.process, encodeText(request.itemId), request.state, request.version, request.owner, request.lease],
    );
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  async extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    this.assertOpen();
    assertClaimRequest(request);
    const { rowCount } = await this.run(
      `UPDATE ${this.#items} SET lease_until = now() + ${msInterval('$5')}
       WHERE process = $1 AND id = $2 AND version = $3 AND lease_owner = $4`,
      [request.process, encodeText(request.itemId), request.version, request.owner, request.lease],
    );
    return rowCount === 1;
  }

  async release(request: ReleaseRequest): Promise<boolean> {
    this.assertOpen();
    assertReleaseRequest(request);
    const { rowCount } = await this.run(
      `UPDATE ${this.#items} SET lease_until = now() + ${msInterval('$5')},
         attempts = CASE WHEN $6 THEN greatest(attempts - 1, 0) ELSE attempts END,
         last_error = coalesce($7, last_error)
       WHERE process = $1 AND id = $2 AND version = $3 AND lease_owner = $4`,
      [request.process, encodeText(request.itemId), request.version, request.owner, request.delay, request.refundAttempt, request.error ?? null],
    );
    return rowCount === 1;
  }

  async transition(request: TransitionRequest): Promise<ProcessItem | null> {
    this.assertOpen();
    assertTransitionRequest(request);
    const { rows } = await this.run(
      `WITH moved AS (
         UPDATE ${this.#items} SET state = $5, version = version + 1, attempts = 0, lease_owner = NULL, lease_until = NULL,
           updated_at = now(), last_error = $8, data = coalesce($6::json, data)
         WHERE process = $1 AND id = $2 AND state = $3 AND version = $4
         RETURNING *
       ), logged AS (
         INSERT INTO ${this.#transitions} (process, item_id, from_state, to_state, version, kind, idempotency_key, error)
         SELECT process, id, $3, state, version, $7, $9, $8 FROM moved
       )
       SELECT pg_notify($10, $11)::text AS notified, ${ITEM_COLUMNS} FROM moved`,
      [
        request.process,
        encodeText(request.itemId),
        request.from,
        request.version,
        request.to,
        request.data === undefined ? null : JSON.stringify(request.data),
        request.kind,
        request.error ?? null,
        encodeText(request.key),
        this.#channel,
        wakeupKey(request.process, request.to),
      ],
    );
    return rows.length === 0 ? null : toItem(rows[0]);
  }

  protected override async releaseResources(): Promise<void> {
    await Promise.all([...this.#feeds].map((feed) => feed.close()));
    await this.#wakeups?.close();
  }
}

interface FeedPosition {
  xid: string;
  seq: string;
}

class PostgresProcessFeed implements ProcessFeed {
  readonly durable = true;
  readonly resumed: boolean;
  readonly #backend: PostgresProcessBackend;
  readonly #process: string;
  readonly #state: string;
  #position: FeedPosition;
  /** For a feed opened at "now": the snapshot of that moment, whose committed changes it skips. */
  readonly #alreadyCommitted: string | null;
  #closed = false;
  readonly #closing = new AbortController();

  constructor(
    backend: PostgresProcessBackend,
    process: string,
    state: string,
    start: FeedPosition,
    resumed: boolean,
    alreadyCommitted: string | null,
  ) {
    this.#backend = backend;
    this.#process = process;
    this.#state = state;
    this.#position = start;
    this.resumed = resumed;
    this.#alreadyCommitted = alreadyCommitted;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    const { limit, wait, signal } = options;
    const stop = signal ? AbortSignal.any([signal, this.#closing.signal]) : this.#closing.signal;
    // Listen before reading, so a NOTIFY that arrives between the read and the wait is not lost.
    const waiting = new AbortController();
    const onStop = () => waiting.abort();
    stop.addEventListener('abort', onStop, { once: true });
    try {
      const woken = wait > 0 ? this.#backend.wakeup(this.#process, this.#state, waiting.signal) : null;
      let changes = await this.#take(limit);
      if (changes.length === 0 && wait > 0 && !stop.aborted) {
        await Promise.race([sleep(wait, waiting.signal).catch(() => undefined), ...(woken ? [woken] : [])]);
        this.#assertOpen();
        changes = await this.#take(limit);
      }
      return changes;
    } finally {
      stop.removeEventListener('abort', onStop);
      waiting.abort();
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    this.#backend.forgetFeed(this);
  }

  async #take(limit: number): Promise<ProcessChange[]> {
    const changes = await this.#backend.readLog(this.#process, this.#state, this.#position, limit, this.#alreadyCommitted);
    const last = changes.at(-1);
    if (last) this.#position = parsePosition(last.position);
    return changes;
  }

  #assertOpen(): void {
    if (this.#closed) throw new StowageError('E_CLOSED', 'PostgresProcessBackend feed is closed');
  }
}

function wakeupKey(process: string, state: string): string {
  // Process and state names cannot contain "/".
  return `${process}/${state}`;
}

function parsePosition(position: string): FeedPosition {
  const match = typeof position === 'string' ? /^(\d{1,20}):(\d{1,20})$/.exec(position) : null;
  if (!match) throw new StowageError('E_INVALID_OPTION', `not a position of the Postgres process feed: ${JSON.stringify(position)}`);
  return { xid: match[1]!, seq: match[2]! };
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
