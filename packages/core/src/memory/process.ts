import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import { StowageError } from '../errors.js';
import { compareKeys } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import { ProcessBackendBase } from '../adapter/process.js';
import { localHandle } from '../adapter/store.js';
import type { JsonObject } from '../json.js';
import type {
  ClaimRequest,
  CreateItemRequest,
  ExtendLeaseRequest,
  FindClaimableRequest,
  ListItemsRequest,
  ProcessChange,
  ProcessFeed,
  ProcessFeedReadOptions,
  ProcessItem,
  ReleaseRequest,
  TransitionKind,
  TransitionRecord,
  TransitionRequest,
} from '../contracts/process.js';
import { MEMORY_CAPABILITIES, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

/** The in-memory process backend pushes changes to its feeds (in-process events). */
export const MEMORY_PROCESS_CAPABILITIES: Capabilities = Object.freeze({ ...MEMORY_CAPABILITIES, changeFeed: true });

interface ItemRecord {
  process: string;
  id: string;
  state: string;
  /** Encoded, so every read hands out a fresh copy. */
  dataText: string;
  version: number;
  attempts: number;
  lastError: string | null;
  leaseOwner: string | null;
  leaseUntil: number | null;
  createdAt: number;
  updatedAt: number;
}

interface LogRecord {
  /** 1-based position in the log: the feed's resume token. */
  seq: number;
  process: string;
  itemId: string;
  from: string | null;
  to: string;
  version: number;
  kind: TransitionKind;
  key: string | null;
  error: string | null;
  at: number;
}

/** The process tables of one MemoryStorage: items, the transition log, and waiting feeds. */
class ProcessTables {
  readonly items = new Map<string, ItemRecord>();
  readonly log: LogRecord[] = [];
  /** Log entries by item, and by the (process, state) they entered: the log's indexes. */
  readonly logByItem = new Map<string, LogRecord[]>();
  readonly logByTarget = new Map<string, LogRecord[]>();
  readonly #waiters = new Set<() => void>();

  append(entry: Omit<LogRecord, 'seq'>): void {
    const record = { seq: this.log.length + 1, ...entry };
    this.log.push(record);
    push(this.logByItem, itemKey(entry.process, entry.itemId), record);
    push(this.logByTarget, itemKey(entry.process, entry.to), record);
    for (const wake of [...this.#waiters]) wake();
  }

  /** Resolves on the next append, after `ms`, or on abort, whichever comes first. */
  waitForAppend(ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
      if (signal?.aborted) done();
    });
  }
}

const tablesByStorage = new WeakMap<MemoryStorage, ProcessTables>();

function tablesOf(storage: MemoryStorage): ProcessTables {
  let tables = tablesByStorage.get(storage);
  if (!tables) tablesByStorage.set(storage, (tables = new ProcessTables()));
  return tables;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Process names cannot contain NUL, so this key is unambiguous. */
function itemKey(processName: string, id: string): string {
  return `${processName}\u0000${id}`;
}

export type MemoryProcessBackendOptions = MemoryOptions;

/**
 * {@link ProcessBackend} in process memory: the transition log is an array, its index is the
 * resume token, and feeds are woken by in-process events. Backends built on one
 * `createMemoryStorage()` share items, like processes on one database.
 */
export class MemoryProcessBackend extends ProcessBackendBase {
  readonly #tables: ProcessTables;
  readonly #clock: Clock;
  readonly #feeds: Set<MemoryFeed>;

  constructor(options?: MemoryProcessBackendOptions) {
    const feeds = new Set<MemoryFeed>();
    // Closing the backend closes the feeds it opened.
    const close = async () => void (await Promise.all([...feeds].map((feed) => feed.close())));
    super({ name: 'MemoryProcessBackend', system: 'memory' }, { ...localHandle(MEMORY_PROCESS_CAPABILITIES), close });
    this.#feeds = feeds;
    const { storage, clock } = resolveMemoryOptions(options);
    this.#tables = tablesOf(storage);
    this.#clock = clock;
  }

  protected async _createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    const key = itemKey(request.process, request.id);
    const existing = this.#tables.items.get(key);
    if (existing) return { item: toItem(existing), created: false };
    const now = this.#clock.now();
    const record: ItemRecord = {
      process: request.process,
      id: request.id,
      state: request.state,
      dataText: JSON.stringify(request.data),
      version: 1,
      attempts: 0,
      lastError: null,
      leaseOwner: null,
      leaseUntil: null,
      createdAt: now,
      updatedAt: now,
    };
    this.#tables.items.set(key, record);
    this.#tables.append({ process: request.process, itemId: request.id, from: null, to: request.state, version: 1, kind: 'create', key: null, error: null, at: now });
    return { item: toItem(record), created: true };
  }

  protected async _getItem(processName: string, id: string): Promise<ProcessItem | null> {
    const record = this.#tables.items.get(itemKey(processName, id));
    return record ? toItem(record) : null;
  }

  protected async _listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    const { state, after, limit } = request;
    return [...this.#tables.items.values()]
      .filter((record) => record.process === request.process && (state === undefined || record.state === state))
      .filter((record) => after === undefined || compareKeys(record.id, after) > 0)
      .sort((a, b) => compareKeys(a.id, b.id))
      .slice(0, limit)
      .map(toItem);
  }

  protected async _history(processName: string, id: string): Promise<TransitionRecord[]> {
    return (this.#tables.logByItem.get(itemKey(processName, id)) ?? []).map(toTransition);
  }

  protected async _openFeed(processName: string, state: string, position: string | null): Promise<ProcessFeed> {
    const head = this.#tables.log.length;
    let start = head;
    let resumed = false;
    if (position !== null) {
      const seq = parsePosition(position);
      // A position past the end belongs to another storage (this one was created since): start now.
      if (seq <= head) {
        start = seq;
        resumed = true;
      }
    }
    const feed = new MemoryFeed(this.#tables, itemKey(processName, state), start, resumed, () => this.assertOpen(), (closed) =>
      this.#feeds.delete(closed),
    );
    this.#feeds.add(feed);
    return feed;
  }

  protected async _findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    const now = this.#clock.now();
    const { state, includeUnclaimed, unclaimedFor, limit } = request;
    const unclaimed = (record: ItemRecord) => includeUnclaimed || (unclaimedFor !== undefined && record.updatedAt <= now - unclaimedFor);
    return [...this.#tables.items.values()]
      .filter(
        (record) =>
          record.process === request.process &&
          record.state === state &&
          (record.leaseOwner === null ? unclaimed(record) : record.leaseUntil! <= now),
      )
      .sort((a, b) => (a.leaseUntil ?? -Infinity) - (b.leaseUntil ?? -Infinity) || compareKeys(a.id, b.id))
      .slice(0, limit)
      .map((record) => ({ itemId: record.id, state: record.state, version: record.version, position: '' }));
  }

  protected async _claim(request: ClaimRequest): Promise<ProcessItem | null> {
    const record = this.#tables.items.get(itemKey(request.process, request.itemId));
    const now = this.#clock.now();
    if (!record || record.state !== request.state || record.version !== request.version) return null;
    if (record.leaseUntil !== null && record.leaseUntil > now) return null;
    record.leaseOwner = request.owner;
    record.leaseUntil = now + request.lease;
    record.attempts++;
    return toItem(record);
  }

  protected async _extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    const record = this.#heldBy(request);
    if (!record) return false;
    record.leaseUntil = this.#clock.now() + request.lease;
    return true;
  }

  protected async _release(request: ReleaseRequest): Promise<boolean> {
    const record = this.#heldBy(request);
    if (!record) return false;
    record.leaseUntil = this.#clock.now() + request.delay;
    if (request.refundAttempt) record.attempts = Math.max(0, record.attempts - 1);
    if (request.error !== undefined) record.lastError = request.error;
    return true;
  }

  protected async _transition(request: TransitionRequest): Promise<ProcessItem | null> {
    const record = this.#tables.items.get(itemKey(request.process, request.itemId));
    if (!record || record.state !== request.from || record.version !== request.version) return null;
    const now = this.#clock.now();
    record.state = request.to;
    record.version++;
    record.attempts = 0;
    record.leaseOwner = null;
    record.leaseUntil = null;
    record.updatedAt = now;
    record.lastError = request.error ?? null;
    if (request.data !== undefined) record.dataText = JSON.stringify(request.data);
    this.#tables.append({
      process: request.process,
      itemId: request.itemId,
      from: request.from,
      to: request.to,
      version: record.version,
      kind: request.kind,
      key: request.key,
      error: request.error ?? null,
      at: now,
    });
    return toItem(record);
  }

  /**
   * The item if `owner` made the last claim on it at `version`. A lease that ran out still
   * belongs to its owner until someone else claims the item (which changes the owner).
   */
  #heldBy(request: { process: string; itemId: string; version: number; owner: string }): ItemRecord | null {
    const record = this.#tables.items.get(itemKey(request.process, request.itemId));
    if (!record || record.version !== request.version || record.leaseOwner !== request.owner) return null;
    return record;
  }
}

class MemoryFeed implements ProcessFeed {
  readonly durable = true;
  readonly #lifecycle = new Lifecycle('MemoryProcessBackend feed');
  #position: number;
  readonly #closeController = new AbortController();

  constructor(
    private readonly tables: ProcessTables,
    private readonly target: string,
    start: number,
    readonly resumed: boolean,
    private readonly assertBackendOpen: () => void,
    private readonly onClose: (feed: MemoryFeed) => void,
  ) {
    this.#position = start;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    const { limit, wait, signal } = options;
    let changes = this.#take(limit);
    if (changes.length === 0 && wait > 0 && !signal?.aborted) {
      const stop = signal ? AbortSignal.any([signal, this.#closeController.signal]) : this.#closeController.signal;
      await this.tables.waitForAppend(wait, stop);
      this.#assertOpen();
      changes = this.#take(limit);
    }
    return changes;
  }

  close(): Promise<void> {
    return this.#lifecycle.close(async () => {
      this.#closeController.abort();
      this.onClose(this);
    });
  }

  #assertOpen(): void {
    this.assertBackendOpen();
  }

  #take(limit: number): ProcessChange[] {
    const entries = this.tables.logByTarget.get(this.target) ?? [];
    // Binary search for the first entry after the position.
    let low = 0;
    let high = entries.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (entries[middle]!.seq <= this.#position) low = middle + 1;
      else high = middle;
    }
    const taken = entries.slice(low, low + limit);
    if (taken.length > 0) this.#position = taken.at(-1)!.seq;
    return taken.map((entry) => ({ itemId: entry.itemId, state: entry.to, version: entry.version, position: String(entry.seq) }));
  }
}

function parsePosition(position: string): number {
  if (typeof position !== 'string' || !/^\d{1,15}$/.test(position)) {
    throw new StowageError('E_INVALID_OPTION', `not a position of the in-memory process feed: ${JSON.stringify(position)}`);
  }
  return Number(position);
}

function toItem(record: ItemRecord): ProcessItem {
  return {
    id: record.id,
    state: record.state,
    data: JSON.parse(record.dataText) as JsonObject,
    version: record.version,
    attempts: record.attempts,
    lastError: record.lastError,
    leaseOwner: record.leaseOwner,
    leaseUntil: record.leaseUntil === null ? null : new Date(record.leaseUntil),
    createdAt: new Date(record.createdAt),
    updatedAt: new Date(record.updatedAt),
  };
}

function toTransition(record: LogRecord): TransitionRecord {
  return {
    itemId: record.itemId,
    from: record.from,
    to: record.to,
    version: record.version,
    kind: record.kind,
    key: record.key,
    error: record.error,
    at: new Date(record.at),
  };
}
