import { StowageError, type ProcessChange, type ProcessFeed, type ProcessFeedReadOptions } from '@stowage/core';
import { sleep } from '@stowage/core/adapter';
import { BSON, type Collection, type Db, type Document } from 'mongodb';
import { isTransientError } from '../errors.js';
import type { ProcessVersionDocument } from './documents.js';

/** Runs a feed's database work as a call of its backend (refused once closed, errors mapped). */
export type BackendCall = <T>(operation: () => Promise<T>) => Promise<T>;

/** The part of a driver `ChangeStream` the feed uses (a test passes a stand-in where no server has change streams). */
export interface FeedStream {
  tryNext(): Promise<Document | null>;
  close(): Promise<void>;
  /** True once the stream ended: closed, or invalidated by the server. */
  readonly closed: boolean;
}

/** Where a change-stream feed comes from. */
export interface FeedSource {
  /** A change stream of the versions entering the state: after `resumeAfter`, or from now. */
  watch(resumeAfter: Document | null): FeedStream;
  /** The identity of the collection as it is now (its UUID), `null` when unknown (not created yet, or not listable). */
  incarnation(): Promise<string | null>;
}

/** The change stream of one process collection's versions entering `state`. */
export function changeStreamSource(collection: Collection<ProcessVersionDocument>, db: Db, processName: string, state: string): FeedSource {
  const pipeline = [
    { $match: { operationType: 'insert', 'fullDocument.process': processName, 'fullDocument.state': state } },
    // operationType stays: an invalidation (the collection dropped or renamed) must be seen.
    { $project: { operationType: 1, 'fullDocument.itemId': 1, 'fullDocument.version': 1, 'fullDocument.state': 1 } },
  ];
  return {
    watch: (resumeAfter) => collection.watch<ProcessVersionDocument>(pipeline, { maxAwaitTimeMS: 200, ...(resumeAfter ? { resumeAfter } : {}) }),
    incarnation: async () => {
      // The primary's view, whatever the client's read preference (a role without the
      // listCollections action gets `null`: a dropped and re-created collection goes unnoticed).
      const [info] = await db.listCollections({ name: collection.collectionName }, { readPreference: 'primary' }).toArray();
      const uuid: unknown = (info as Document | undefined)?.info?.uuid;
      return uuid === undefined || uuid === null ? null : BSON.EJSON.stringify(uuid as Document);
    },
  };
}

/**
 * Versions entering the state, from a change stream of inserts. A change's position is its
 * resume token, with the identity (UUID) of the collection it came from.
 *
 * The stream is reopened whenever it ends: after a resumable error (the driver's own resume
 * failed too) from the last change read; after anything else (history lost, a fatal error, an
 * invalidation by a drop or rename) at "now", and `resumed` turns false (the engine's recovery
 * scans find what waits). A saved position whose token the server no longer has, or that
 * names an earlier incarnation of the collection (dropped or renamed since: resuming would
 * replay into the invalidation at every restart), opens the stream at "now" with
 * `resumed: false`, and the engine scans what is waiting.
 */
export class ChangeStreamFeed implements ProcessFeed {
  readonly durable = true;
  readonly #source: FeedSource;
  readonly #call: BackendCall;
  readonly #buffered: Document[] = [];
  #stream: FeedStream | undefined;
  #incarnation: string | null;
  /** The token of the last change read (or opened after): where a stream that died of a transient error resumes. */
  #lastToken: Document | null = null;
  #resumed = false;
  #closed = false;

  private constructor(source: FeedSource, incarnation: string | null, call: BackendCall) {
    this.#source = source;
    this.#incarnation = incarnation;
    this.#call = call;
  }

  /** True when the feed runs exactly after the position it was opened with, and has never had to start again at "now". */
  get resumed(): boolean {
    return this.#resumed;
  }

  static async open(source: FeedSource, position: string | null, call: BackendCall): Promise<ChangeStreamFeed> {
    const saved = position === null ? null : parsePosition(position);
    const incarnation = await source.incarnation().catch(() => null);
    const sameCollection = saved !== null && (saved.incarnation === null || incarnation === null || saved.incarnation === incarnation);
    const feed = new ChangeStreamFeed(source, incarnation, call);
    const token = sameCollection ? saved.token : null;
    feed.#resumed = token !== null;
    feed.#lastToken = token;
    await feed.#start(token);
    return feed;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    const { limit, wait, signal } = options;
    const deadline = performance.now() + wait;
    const changes: ProcessChange[] = [];
    while (changes.length < limit) {
      let change: Document | null;
      try {
        change = this.#buffered.shift() ?? (await this.#call(() => this.#next()));
      } catch (error) {
        if (changes.length === 0) throw error;
        break; // what was read is returned; the next read resumes after it
      }
      this.#assertOpen();
      if (change) {
        if (this.#incarnation === null) this.#incarnation = await this.#source.incarnation().catch(() => null);
        const document = change.fullDocument as Pick<ProcessVersionDocument, 'itemId' | 'version' | 'state'>;
        this.#lastToken = change._id as Document;
        const position = encodePosition(this.#lastToken, this.#incarnation);
        changes.push({ itemId: document.itemId, state: document.state, version: document.version, position });
        continue;
      }
      // tryNext waited up to maxAwaitTimeMS on the server; go on until something came or time is up.
      if (changes.length > 0 || performance.now() >= deadline || signal?.aborted) break;
    }
    return changes;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#stream?.close().catch(() => undefined);
  }

  /**
   * Opens the stream after `token` (or at now), and reads its first batch, so that a lost token
   * shows up here: an error other than a transient one, or an invalidation, starts it at now.
   */
  async #start(token: Document | null): Promise<void> {
    if (token === null) this.#resumed = false;
    this.#stream = this.#source.watch(token);
    let first: Document | null;
    try {
      first = await this.#stream.tryNext();
    } catch (error) {
      await this.#stream.close().catch(() => undefined);
      this.#stream = undefined;
      if (token === null || isTransientError(error)) throw error;
      return this.#start(null);
    }
    if (isInvalidation(first) || (first === null && this.#stream.closed)) {
      await this.#stream.close().catch(() => undefined);
      if (token === null) throw new StowageError('E_UNAVAILABLE', 'the process collection\'s change stream ended as it opened');
      return this.#start(null);
    }
    if (first) this.#buffered.push(first);
  }

  /** The next change, or `null`; a stream that ended is started again (see the class). */
  async #next(): Promise<Document | null> {
    if (!this.#stream) {
      await this.#start(this.#lastToken); // after a transient error
      if (this.#buffered.length > 0) return this.#buffered.shift()!;
    }
    const stream = this.#stream!;
    let change: Document | null;
    try {
      change = await stream.tryNext();
    } catch (error) {
      await stream.close().catch(() => undefined);
      this.#stream = undefined;
      if (this.#closed) throw error;
      if (isTransientError(error)) throw error; // the next read resumes after the last change read
      this.#lastToken = null;
      await this.#start(null);
      return this.#buffered.shift() ?? null;
    }
    if (isInvalidation(change) || (change === null && stream.closed && !this.#closed)) {
      await stream.close().catch(() => undefined);
      this.#lastToken = null;
      this.#incarnation = await this.#source.incarnation().catch(() => null);
      await this.#start(null);
      return this.#buffered.shift() ?? null;
    }
    return change;
  }

  #assertOpen(): void {
    if (this.#closed) throw new StowageError('E_CLOSED', 'MongoProcessBackend feed is closed');
  }
}

function isInvalidation(change: Document | null): boolean {
  return change?.operationType === 'invalidate';
}

/** A change the polling feed returned and that is still unclaimed this long after is returned again. */
const RETURN_AGAIN_AFTER = 10_000;

/**
 * For servers without change streams: re-reads the indexed set of current versions in the
 * state that nobody has claimed yet. A version stays in that set until it is claimed or
 * retired, so nothing is missed however late its insert becomes visible, and there is no
 * position to keep (`durable: false`). A version already returned is skipped while it still
 * waits, for {@link RETURN_AGAIN_AFTER} ms (so each change is returned once, unless its claim
 * failed and it is still waiting after that).
 */
export class PollingFeed implements ProcessFeed {
  readonly durable = false;
  readonly resumed = true;
  readonly #collection: Collection<ProcessVersionDocument>;
  readonly #waiting: Document;
  readonly #state: string;
  readonly #call: BackendCall;
  readonly #closing = new AbortController();
  #closed = false;
  /** `_id`s returned, with when, that were still unclaimed at the last read. */
  readonly #returned = new Map<string, number>();

  constructor(collection: Collection<ProcessVersionDocument>, processName: string, state: string, call: BackendCall) {
    this.#collection = collection;
    this.#waiting = { process: processName, current: true, state, leaseUntil: null };
    this.#state = state;
    this.#call = call;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    let changes = await this.#call(() => this.#scan(options.limit));
    if (changes.length === 0 && options.wait > 0 && !options.signal?.aborted) {
      const stop = options.signal ? AbortSignal.any([options.signal, this.#closing.signal]) : this.#closing.signal;
      await sleep(options.wait, stop).catch(() => undefined);
      this.#assertOpen();
      changes = await this.#call(() => this.#scan(options.limit));
    }
    return changes;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
  }

  async #scan(limit: number): Promise<ProcessChange[]> {
    const now = performance.now();
    for (const [id, at] of this.#returned) if (now - at > RETURN_AGAIN_AFTER) this.#returned.delete(id);
    if (this.#returned.size > 0) {
      const still = await this.#collection.find({ ...this.#waiting, _id: { $in: [...this.#returned.keys()] } }, { projection: { _id: 1 } }).toArray();
      const stillWaiting = new Set(still.map((document) => document._id));
      for (const id of this.#returned.keys()) if (!stillWaiting.has(id)) this.#returned.delete(id);
    }
    const skip = [...this.#returned.keys()];
    const documents = await this.#collection
      .find({ ...this.#waiting, ...(skip.length > 0 && { _id: { $nin: skip } }) }, { projection: { itemId: 1, version: 1 } })
      .sort({ at: 1 })
      .limit(limit)
      .toArray();
    for (const document of documents) this.#returned.set(document._id, now);
    return documents.map((document) => ({ itemId: document.itemId, state: this.#state, version: document.version, position: '' }));
  }

  #assertOpen(): void {
    if (this.#closed) throw new StowageError('E_CLOSED', 'MongoProcessBackend feed is closed');
  }
}

/** A position: the change's resume token and the identity of the collection it came from. */
function encodePosition(token: Document, incarnation: string | null): string {
  return BSON.EJSON.stringify({ token, collection: incarnation });
}

/** A saved position (a bare resume token is a position written before positions named their collection). */
function parsePosition(position: string): { token: Document; incarnation: string | null } {
  try {
    const parsed = BSON.EJSON.parse(position) as unknown;
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const { token, collection } = parsed as { token?: unknown; collection?: unknown };
      if (token !== null && typeof token === 'object' && !Array.isArray(token)) {
        return { token: token as Document, incarnation: typeof collection === 'string' ? collection : null };
      }
      if ('_data' in parsed) return { token: parsed as Document, incarnation: null };
    }
  } catch {
    // reported below
  }
  throw new StowageError('E_INVALID_OPTION', `not a position of the Mongo process feed: ${JSON.stringify(position)}`);
}
