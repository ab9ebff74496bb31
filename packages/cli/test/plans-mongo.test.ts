import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MongoClient, type CommandStartedEvent, type CommandSucceededEvent, type Document } from 'mongodb';
import { DEFAULT_COLLECTIONS } from '@stowage/mongo';
import { findMongoServer, type FoundBackend } from '@stowage/test-env';
import { encodeCursor } from '../src/model.js';
import type { MongoSession } from '../src/mongo/session.js';
import { workflows } from '../src/mongo/inspect.js';
import { unique } from './support.js';

/*
 * Paging over a large collection without reading it, on MongoDB: a page of `inspect workflows`
 * deep into 100,000 snapshots sends one `find` from the cursor (`_id > …`, in `_id` order,
 * `limit` = page + 1) and gets one page back, whatever lies before or after it; a rare status is
 * filtered by the server. Counted with the driver's command monitoring (statements, not
 * timings), on FerretDB (STOWAGE_MONGO_URL).
 */

describe('inspect workflows on MongoDB: a page costs one bounded find', () => {
  let server: FoundBackend;
  let client: MongoClient;
  let session: MongoSession;
  const database = unique('cli_pages');
  const started: CommandStartedEvent[] = [];
  const replies = new Map<number, Document>();
  const snapshot = (status: string) => JSON.stringify({ formatVersion: 1, steps: { fetch: { ok: true, value: 1 } }, execution: { status, lastUpdated: '2026-11-28T00:00:00.000Z' } });

  beforeAll(async () => {
    server = (await findMongoServer())!;
    client = new MongoClient(server.url, { monitorCommands: true });
    await client.connect();
    const db = client.db(database);
    // Documents as the snapshot store writes them; every 1000th workflow failed.
    const collection = db.collection<{ _id: string } & Document>(DEFAULT_COLLECTIONS.snapshots);
    for (let batch = 0; batch < 10; batch++) {
      const docs: Array<{ _id: string } & Document> = [];
      for (let i = batch * 10_000 + 1; i <= (batch + 1) * 10_000; i++) {
        const ns = `p${i % 10}`;
        const status = i % 1000 === 0 ? 'failed' : 'running';
        docs.push({ _id: `${ns}\u0000wf-${String(i).padStart(7, '0')}`, ns, value: snapshot(status), version: i, updatedAt: new Date(), finished: status === 'failed' ? 'failed' : '' });
      }
      await collection.insertMany(docs, { ordered: false });
    }
    // Written by an older store: no `finished`, the status only in the JSON.
    await collection.insertMany([
      { _id: 'legacy\u0000old-1', ns: 'legacy', value: snapshot('failed'), version: 1, updatedAt: new Date() },
      { _id: 'legacy\u0000old-2', ns: 'legacy', value: snapshot('running'), version: 1, updatedAt: new Date() },
    ]);
    client.on('commandStarted', (event) => started.push(event));
    client.on('commandSucceeded', (event: CommandSucceededEvent) => replies.set(event.requestId, event.reply as Document));
    session = { client, db, url: server.url, collections: { ...DEFAULT_COLLECTIONS }, now: async () => new Date() };
  });

  afterAll(async () => {
    await client.db(database).dropDatabase();
    await client.close();
    await server.stop();
  });

  /** The commands `run` sends, with the number of documents each reply holds. */
  async function commandsOf<T>(run: () => Promise<T>): Promise<{ result: T; commands: Array<{ name: string; command: Document; documents: number }> }> {
    started.length = 0;
    const result = await run();
    const commands = started.map((event) => {
      const reply = replies.get(event.requestId);
      // The driver sends a sort as a Map (its field order): shown as the object it was given.
      const command = event.command.sort instanceof Map ? { ...event.command, sort: Object.fromEntries(event.command.sort) } : event.command;
      return { name: event.commandName, command, documents: (reply?.cursor?.firstBatch ?? reply?.cursor?.nextBatch ?? []).length };
    });
    return { result, commands };
  }

  // No timing is asserted; FerretDB (SQLite) reads and sorts the whole collection for a find, seconds on a loaded machine.
  it('a page deep into 100,000 snapshots: one find from the cursor with limit 101, 101 documents back; the leases of the page in one find', { timeout: 180_000 }, async () => {
    const after = 'p5\u0000wf-0050005';
    const { result, commands } = await commandsOf(() => workflows(session, { limit: 100, cursor: encodeCursor([after]) }));
    expect(result.items).toHaveLength(100);
    expect(result.items[0]).toMatchObject({ namespace: 'p5', id: 'wf-0050015', status: 'running' });
    expect(result.nextCursor).not.toBeNull();
    // FerretDB leaves the cursor of a find that reached its limit open; the driver closes it (killCursors, no documents).
    const reads = commands.filter((entry) => entry.name !== 'killCursors');
    expect(reads.map(({ name, command, documents }) => ({ name, collection: command.find, documents }))).toEqual([
      { name: 'find', collection: 'awaitly_snapshots', documents: 101 },
      { name: 'find', collection: 'awaitly_workflow_locks', documents: 0 },
    ]);
    const [page, leases] = reads;
    expect(page!.command).toMatchObject({ filter: { $and: [{ value: { $type: 'string' } }, { _id: { $gt: after } }] }, sort: { _id: 1 }, limit: 101 });
    expect(leases!.command.filter._id.$in).toHaveLength(100);
  });

  it('a rare status: the server filters it (one find, no batch after batch of running workflows); older documents without `finished` are read to tell', { timeout: 180_000 }, async () => {
    const { result, commands } = await commandsOf(() => workflows(session, { limit: 5, status: 'failed' }));
    expect(result.items.map((row) => `${row.namespace} ${row.id} ${row.status}`)).toEqual(['legacy old-1 failed', 'p0 wf-0001000 failed', 'p0 wf-0002000 failed', 'p0 wf-0003000 failed', 'p0 wf-0004000 failed']);
    expect(result.nextCursor).not.toBeNull();
    const finds = commands.filter((entry) => entry.command.find === 'awaitly_snapshots');
    expect(finds).toHaveLength(1);
    expect(finds[0]!.command).toMatchObject({ filter: { value: { $type: 'string' }, finished: { $in: ['failed', null] } }, sort: { _id: 1 }, limit: 100 });
    expect(finds[0]!.documents).toBe(100); // the first 100 of the 102 failed or older ones, of 100,002
  });
});
