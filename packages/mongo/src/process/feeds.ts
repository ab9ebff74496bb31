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
  /**
   * Where the stream would resume now: the driver's post-batch resume token once the batch the
   * last change came in is used up (or after a `tryNext` that found nothing), else that change's
   * token. Ahead of the last matching change while other changes pass by, so a position saved from
   * it does not fall out of the oplog while the feed's own changes are rare.
   */
  readonly resumeToken?: unknown;
}

/** The versions waiting in the state (a driver `FindCursor`): what a feed that had to start again at "now" returns first. */
export interface WaitingCursor {
  tryNext(): Promise<Document | null>;
  close(): Promise<void>;
}

/** Where a change-stream feed comes from. */
export interface FeedSource {
  /** A change stream of the versions entering the state: after `resumeAfter`, or from now. */
  watch(resumeAfter: Document | null): FeedStream;
  /** The identity of the collection as it is now (its UUID), `null` when unknown (not created yet, or not listable). */
  incarnation(): Promise<string | null>;
  /** The versions in the state nobody has claimed yet (`itemId`, `version`, `state`), oldest first. */
  waiting(): WaitingCursor;
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
    waiting: () =>
      collection
        .find({ process: processName, current: true, state, leaseUntil: null }, { projection: { itemId: 1, version: 1, state: 1 } })
        .sort({ at: 1 }),
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
 * invalidation by a drop or rename) at "now", and `resumed` turns false. The engine scans what
 * waits only when a feed opens without resuming, so a feed that starts again at "now" while
 * running returns first the versions waiting in the state (see `FeedSource.waiting`): those
 * inserted while no stream ran come out then, not at the next recovery scan. A saved position whose token the server no longer has, or that
 * names an earlier incarnation of the collection (dropped or renamed since: resuming would
 * replay into the invalidation at every restart), opens the stream at "now" with
 * `resumed: false`, and the engine scans what is waiting.
 */
export class ChangeStreamFeed implements ProcessFeed {
  readonly durable = true;
  readonly #source: FeedSource;
  readonly #call: BackendCall;
  /** A change read by `#start` (to see whether the stream opened), with where the stream stood after it. */
  readonly #buffered: { change: Document; token: Document }[] = [];
  #stream: FeedStream | undefined;
  #incarnation: string | null;
  /**
   * Where the stream stood after the last change read (or after an idle read: the driver's
   * post-batch resume token): where a stream that died of a transient error resumes, and the
   * position of the changes read.
   */
  #lastToken: Document | null = null;
  /** After a start again at "now" while running: the waiting versions still to return, and the position they carry. */
  #rescan: { cursor: WaitingCursor; position: string } | undefined;
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
    // '': no change had been read when the stream had to start again at "now" (see #restartAtNow).
    const saved = position === null || position === '' ? null : parsePosition(position);
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
      let next: ProcessChange | null;
      try {
        next = await this.#call(() => this.#nextChange());
      } catch (error) {
        if (changes.length === 0) throw error;
        break; // what was read is returned; the next read resumes after it
      }
      this.#assertOpen();
      if (next) {
        changes.push(next);
        continue;
      }
      // tryNext waited up to maxAwaitTimeMS on the server; go on until something came or time is up.
      if (changes.length > 0 || performance.now() >= deadline || signal?.aborted) break;
    }
    return changes;
  }

  /** The next change: a waiting version of a re-scan, a buffered change, or the stream's next; `null` when none came. */
  async #nextChange(): Promise<ProcessChange | null> {
    const waiting = await this.#nextWaiting();
    if (waiting) return waiting;
    const read = this.#buffered.shift() ?? (await this.#next());
    if (!read) return this.#rescan ? this.#nextChange() : null; // the stream just started again: the waiting versions first
    if (this.#incarnation === null) this.#incarnation = await this.#source.incarnation().catch(() => null);
    const document = read.change.fullDocument as Pick<ProcessVersionDocument, 'itemId' | 'version' | 'state'>;
    this.#lastToken = read.token;
    return { itemId: document.itemId, state: document.state, version: document.version, position: encodePosition(read.token, this.#incarnation) };
  }

  /** The next version of a re-scan, or `null` when there is none (left) to return. */
  async #nextWaiting(): Promise<ProcessChange | null> {
    const rescan = this.#rescan;
    if (!rescan) return null;
    let document: Document | null;
    try {
      document = await rescan.cursor.tryNext();
    } catch (error) {
      this.#stopRescan(); // the engine's recovery scans find the rest
      throw error;
    }
    if (document === null) {
      this.#stopRescan();
      return null;
    }
    return { itemId: document.itemId as string, state: document.state as string, version: document.version as number, position: rescan.position };
  }

  #stopRescan(): void {
    void this.#rescan?.cursor.close().catch(() => undefined);
    this.#rescan = undefined;
  }

  /**
   * Starts the stream again at "now" while running, and has the versions waiting in the state
   * returned first. They carry the position of the last change read before (or none, `''`): a
   * worker that saves it and restarts resumes there, or, when that token is gone too, starts at
   * "now" and scans what waits.
   */
  async #restartAtNow(): Promise<void> {
    const position = this.#lastToken === null ? '' : encodePosition(this.#lastToken, this.#incarnation);
    this.#lastToken = null;
    this.#incarnation = await this.#source.incarnation().catch(() => null);
    this.#stopRescan();
    this.#rescan = { cursor: this.#source.waiting(), position };
    await this.#start(null);
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#stopRescan();
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
    if (first) this.#buffered.push({ change: first, token: tokenAfter(this.#stream, first) });
  }

  /** The next change and where the stream stood after it, or `null`; a stream that ended is started again (see the class). */
  async #next(): Promise<{ change: Document; token: Document } | null> {
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
      await this.#restartAtNow();
      return null;
    }
    if (isInvalidation(change) || (change === null && stream.closed && !this.#closed)) {
      await stream.close().catch(() => undefined);
      await this.#restartAtNow();
      return null;
    }
    if (change === null) {
      // Idle: the post-batch resume token moved on with the oplog; a transient error resumes from there.
      const token = stream.resumeToken as Document | null | undefined;
      if (token) this.#lastToken = token;
      return null;
    }
    return { change, token: tokenAfter(stream, change) };
  }

  #assertOpen(): void {
    if (this.#closed) throw new StowageError('E_CLOSED', 'MongoProcessBackend feed is closed');
  }
}

/** Where `stream` stands after it returned `change` (see `FeedStream.resumeToken`). */
function tokenAfter(stream: FeedStream, change: Document): Document {
  return ((stream.resumeToken as Document | null | undefined) ?? change._id) as Document;
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
