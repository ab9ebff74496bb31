import { StowageError, type ProcessChange, type ProcessFeed, type ProcessFeedReadOptions } from '@stowage/core';
import { sleep } from '@stowage/core/adapter';

/** A place in the transition log: the row's transaction id and sequence number. */
export interface FeedPosition {
  xid: string;
  seq: string;
}

/** What a feed needs from its backend; each read is a call of the backend (refused once it is closed). */
export interface FeedSource {
  /** One page of the log after `after` (see `PostgresProcessBackend`). */
  read(after: FeedPosition, limit: number): Promise<ProcessChange[]>;
  /** Resolves on a NOTIFY for the feed's state; `null` when wake-ups are off (the feed sleeps instead). */
  wakeup(signal: AbortSignal): Promise<void> | null;
  /** Aborts when the backend closes. */
  readonly closeSignal: AbortSignal;
  onClose(feed: PostgresProcessFeed): void;
}

/**
 * A feed of the items entering one state: it reads the transition log in `(xid, seq)` order
 * from its position, and between reads waits for a NOTIFY (or sleeps, when LISTEN is not
 * available). Its positions are `"xid:seq"` resume tokens.
 */
export class PostgresProcessFeed implements ProcessFeed {
  readonly durable = true;
  readonly resumed: boolean;
  readonly #source: FeedSource;
  #position: FeedPosition;
  readonly #closing = new AbortController();

  constructor(source: FeedSource, start: FeedPosition, resumed: boolean) {
    this.#source = source;
    this.#position = start;
    this.resumed = resumed;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    const { limit, wait, signal } = options;
    const stop = AbortSignal.any([this.#closing.signal, this.#source.closeSignal, ...(signal ? [signal] : [])]);
    // Listen before reading, so a NOTIFY that arrives between the read and the wait is not lost.
    const waiting = new AbortController();
    const onStop = () => waiting.abort();
    stop.addEventListener('abort', onStop, { once: true });
    try {
      const woken = wait > 0 ? this.#source.wakeup(waiting.signal) : null;
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
    this.#closing.abort();
    this.#source.onClose(this);
  }

  async #take(limit: number): Promise<ProcessChange[]> {
    const changes = await this.#source.read(this.#position, limit);
    const last = changes.at(-1);
    if (last) this.#position = parseFeedPosition(last.position);
    return changes;
  }

  #assertOpen(): void {
    if (this.#closing.signal.aborted) throw new StowageError('E_CLOSED', 'PostgresProcessBackend feed is closed');
  }
}

/** The position a resume token names; `E_INVALID_OPTION` for anything else. */
export function parseFeedPosition(position: string): FeedPosition {
  const match = typeof position === 'string' ? /^(\d{1,20}):(\d{1,20})$/.exec(position) : null;
  if (!match) throw new StowageError('E_INVALID_OPTION', `not a position of the Postgres process feed: ${JSON.stringify(position)}`);
  return { xid: match[1]!, seq: match[2]! };
}
