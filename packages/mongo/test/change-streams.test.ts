import { EventEmitter } from 'node:events';
import type { Document } from 'mongodb';
import { describe, expect, it } from 'vitest';
import { ChangeStreamFeed, type FeedSource, type FeedStream } from '../src/process/feeds.js';
import { ReleaseWakeups, type ReleaseStream } from '../src/stores/leases.js';

/**
 * The change-stream logic of the process feed and of lock wake-ups, driven through the small
 * stream interface both take. No server available here has change streams (FerretDB and
 * jongodb refuse `$changeStream`), so these streams are scripted: each step is what a driver
 * `ChangeStream` hands back (a change, an invalidation, an error with the server's code). On a
 * real replica set the same code runs against `collection.watch()`: the conformance suite's
 * process cases (durable feed, resume after restart) cover it there.
 */

/**
 * A change, an error, `{ batchEnd: token }` (after the change before it the batch is used up:
 * the driver's `resumeToken` is then the post-batch resume token), or `{ idle: token }` (a
 * `tryNext` that finds nothing, the post-batch resume token moved on).
 */
type Step = Document | null | { error: { code?: number; name?: string; message: string } } | { batchEnd: Document } | { idle: Document };

/** A stream that answers `tryNext` with its script, then `null` (and `closed` once told to end). */
class ScriptedStream implements FeedStream {
  closed = false;
  resumeToken: unknown = undefined;
  readonly #steps: Step[];
  constructor(steps: Step[]) {
    this.#steps = [...steps];
  }
  async tryNext(): Promise<Document | null> {
    const step = this.#steps.shift() ?? null;
    if (step && 'error' in step) throw Object.assign(new Error(step.error.message), step.error);
    if (step && 'idle' in step) {
      this.resumeToken = step.idle;
      return null;
    }
    const change = step as Document | null;
    if (change?.operationType === 'invalidate') this.closed = true;
    if (change) {
      const next = this.#steps[0];
      this.resumeToken = next && 'batchEnd' in next ? (this.#steps.shift() as { batchEnd: Document }).batchEnd : change._id;
    }
    return change;
  }
  async close(): Promise<void> {
    this.closed = true;
  }
}

/**
 * A source whose streams follow `scripts` in turn, recording where each was asked to start;
 * `waiting` lists the versions waiting in the state (what a re-scan reads).
 */
function scriptedSource(
  scripts: Step[][],
  incarnation: string | null = 'uuid-1',
  waiting: Document[] = [],
): FeedSource & { opened: (Document | null)[]; incarnationNow: string | null; scans: number } {
  const opened: (Document | null)[] = [];
  const source = {
    opened,
    incarnationNow: incarnation,
    scans: 0,
    watch(resumeAfter: Document | null) {
      opened.push(resumeAfter);
      return new ScriptedStream(scripts.shift() ?? []);
    },
    incarnation: async () => source.incarnationNow,
    waiting() {
      source.scans++;
      const left = [...waiting];
      return { tryNext: async () => left.shift() ?? null, close: async () => undefined };
    },
  };
  return source;
}

const insert = (n: number) => ({ _id: { _data: `token-${n}` }, operationType: 'insert', fullDocument: { itemId: `item-${n}`, version: 1, state: 's' } });
const call = <T>(operation: () => Promise<T>) => operation();
const read = (feed: ChangeStreamFeed) => feed.read({ limit: 10, wait: 0 });

describe('change-stream process feed', () => {
  it('positions carry the collection identity; a saved position resumes after its token', async () => {
    const first = scriptedSource([[insert(1)]]);
    const feed = await ChangeStreamFeed.open(first, null, call);
    expect(feed.resumed).toBe(false);
    const [change] = await read(feed);
    expect(change).toMatchObject({ itemId: 'item-1' });
    const second = scriptedSource([[insert(2)]]);
    const resumed = await ChangeStreamFeed.open(second, change!.position, call);
    expect(second.opened).toEqual([{ _data: 'token-1' }]);
    expect(resumed.resumed).toBe(true);
    // A bare token (a position saved before positions named their collection) still resumes.
    const legacy = scriptedSource([[]]);
    expect((await ChangeStreamFeed.open(legacy, JSON.stringify({ _data: 'token-1' }), call)).resumed).toBe(true);
    expect(legacy.opened).toEqual([{ _data: 'token-1' }]);
  });

  it('a saved token of a dropped or renamed collection (another incarnation) starts at now, without replaying into the invalidation', async () => {
    const before = scriptedSource([[insert(1)]], 'uuid-old');
    const [change] = await read(await ChangeStreamFeed.open(before, null, call));
    const after = scriptedSource([[insert(2)]], 'uuid-new');
    const feed = await ChangeStreamFeed.open(after, change!.position, call);
    expect(after.opened).toEqual([null]); // never asked to resume after the old token
    expect(feed.resumed).toBe(false);
    expect((await read(feed)).map((c) => c.itemId)).toEqual(['item-2']);
  });

  it('a token the server no longer has (history lost, 286 / fatal 280) starts at now with resumed: false', async () => {
    for (const code of [286, 280, 260]) {
      const source = scriptedSource([[{ error: { code, message: 'resume point lost' } }], [insert(3)]]);
      const feed = await ChangeStreamFeed.open(source, JSON.stringify({ token: { _data: 'old' }, collection: 'uuid-1' }), call);
      expect(source.opened, String(code)).toEqual([{ _data: 'old' }, null]);
      expect(feed.resumed).toBe(false);
      expect((await read(feed)).map((c) => c.itemId)).toEqual(['item-3']);
    }
  });

  it('a non-resumable error while running (history lost, killOp, fatal) reopens at now and reports resumed: false', async () => {
    for (const error of [{ code: 286, message: 'history lost' }, { code: 280, message: 'fatal' }, { code: 136, message: 'capped position lost' }]) {
      const source = scriptedSource([[insert(1), { error }], [insert(2)]]);
      const feed = await ChangeStreamFeed.open(source, null, call);
      const items = [...(await read(feed)), ...(await read(feed))].map((c) => c.itemId);
      expect(items, String(error.code)).toEqual(['item-1', 'item-2']);
      expect(source.opened).toEqual([null, null]);
      expect(feed.resumed).toBe(false);
    }
  });

  it('an invalidation (drop, rename) reopens at now, on the new incarnation', async () => {
    const source = scriptedSource([[insert(1), { _id: { _data: 'inv' }, operationType: 'invalidate' }], [insert(2)]], 'uuid-1');
    const feed = await ChangeStreamFeed.open(source, null, call);
    const readBefore = read(feed); // reads item-1, then meets the invalidation and reopens
    source.incarnationNow = 'uuid-2'; // the collection was dropped and created again
    const [first, next] = [...(await readBefore), ...(await read(feed))];
    expect(first?.itemId).toBe('item-1');
    expect(JSON.parse(first!.position)).toMatchObject({ collection: 'uuid-1' });
    expect(next?.itemId).toBe('item-2');
    expect(JSON.parse(next!.position)).toMatchObject({ collection: 'uuid-2' });
    expect(source.opened).toEqual([null, null]);
    expect(feed.resumed).toBe(false);
  });

  it('a change that uses up its batch carries the post-batch resume token, and an idle read moves the resume point on with it', async () => {
    const network = { error: { name: 'MongoNetworkError', message: 'connection reset' } };
    const source = scriptedSource([[insert(1), { batchEnd: { _data: 'pbrt-5' } }, { idle: { _data: 'pbrt-9' } }, network], [insert(10)]]);
    const feed = await ChangeStreamFeed.open(source, null, call);
    const [first] = await read(feed);
    expect(first).toMatchObject({ itemId: 'item-1' });
    // A worker that saves this position resumes past the changes of other items and states that came meanwhile.
    expect(JSON.parse(first!.position)).toEqual({ token: { _data: 'pbrt-5' }, collection: 'uuid-1' });
    await expect(read(feed)).rejects.toMatchObject({ name: 'MongoNetworkError' });
    expect((await read(feed)).map((c) => c.itemId)).toEqual(['item-10']);
    expect(source.opened).toEqual([null, { _data: 'pbrt-9' }]);
  });

  it('a stream that has to start again at "now" while running returns the versions waiting in the state first, at the position of the last change read', async () => {
    const waiting = [{ itemId: 'waiting-1', version: 2, state: 's' }, { itemId: 'waiting-2', version: 1, state: 's' }];
    const source = scriptedSource([[insert(1), { error: { code: 286, message: 'history lost' } }], [insert(2)]], 'uuid-1', waiting);
    const feed = await ChangeStreamFeed.open(source, null, call);
    const changes = [...(await read(feed)), ...(await read(feed))];
    expect(changes.map((c) => `${c.itemId}@${c.version}`)).toEqual(['item-1@1', 'waiting-1@2', 'waiting-2@1', 'item-2@1']);
    expect(changes[1]!.position).toBe(changes[0]!.position);
    expect(source.scans).toBe(1);
    expect(feed.resumed).toBe(false);
    // Before any change was read, the waiting versions carry no position (''), which opens a feed at now.
    const early = scriptedSource([[null, { error: { code: 286, message: 'history lost' } }], []], 'uuid-1', waiting.slice(0, 1));
    const [rescanned] = await read(await ChangeStreamFeed.open(early, null, call));
    expect(rescanned).toMatchObject({ itemId: 'waiting-1', position: '' });
    expect((await ChangeStreamFeed.open(scriptedSource([[]]), '', call)).resumed).toBe(false);
  });

  it('after a transient error the next read resumes after the last change read (an error before any change goes to the worker, which retries)', async () => {
    const source = scriptedSource([[insert(1), { error: { name: 'MongoNetworkError', message: 'connection reset' } }], [insert(2)]]);
    const feed = await ChangeStreamFeed.open(source, null, call);
    expect((await read(feed)).map((c) => c.itemId)).toEqual(['item-1']); // the error ends the batch, the change read stays
    expect((await read(feed)).map((c) => c.itemId)).toEqual(['item-2']);
    expect(source.opened).toEqual([null, { _data: 'token-1' }]);
  });
});

/** A release stream that emits what the test says. */
class ScriptedReleases extends EventEmitter implements ReleaseStream {
  closed = false;
  constructor() {
    super();
    queueMicrotask(() => this.emit('resumeTokenChanged'));
  }
  release(key: string): void {
    this.emit('change', { documentKey: { _id: key } });
  }
  async close(): Promise<void> {
    this.closed = true;
    this.emit('close');
  }
}

/** Wake-ups on scripted streams: `streams` are the ones opened, in order. */
function scriptedWakeups(): { wakeups: ReleaseWakeups; streams: ScriptedReleases[] } {
  const streams: ScriptedReleases[] = [];
  const wakeups = new ReleaseWakeups(() => {
    const stream = new ScriptedReleases();
    streams.push(stream);
    return stream;
  });
  return { wakeups, streams };
}

describe('lock wake-ups', () => {
  it('one stream per provider, kept across wait episodes; a release wakes only the waiters of its key', async () => {
    const { wakeups, streams } = scriptedWakeups();
    const never = new AbortController().signal;
    await wakeups.wait('a', never); // the first wait returns once the stream is established
    for (let episode = 0; episode < 3; episode++) {
      let woken = '';
      const a = wakeups.wait('a', never).then(() => (woken += 'a'));
      const b = wakeups.wait('b', never).then(() => (woken += 'b'));
      streams[0]!.release('c');
      streams[0]!.release('a');
      await a;
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(woken).toBe('a'); // b was not woken by the releases of a and c
      streams[0]!.release('b');
      await b;
    }
    expect(streams).toHaveLength(1); // not one stream per wait episode
    await wakeups.close();
    expect(streams[0]!.closed).toBe(true);
  });

  it('after a stream error the next wait opens a new stream; abort ends a wait', async () => {
    const { wakeups, streams } = scriptedWakeups();
    const never = new AbortController().signal;
    await wakeups.wait('a', never);
    streams[0]!.emit('error', new Error('stream failed'));
    await wakeups.wait('a', never);
    expect(streams).toHaveLength(2);
    const controller = new AbortController();
    const waiting = wakeups.wait('a', controller.signal);
    controller.abort();
    await waiting;
    await wakeups.close();
  });
});
