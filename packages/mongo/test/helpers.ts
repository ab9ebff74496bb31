import net from 'node:net';
import { MongoClient, type CommandStartedEvent, type CommandSucceededEvent, type MongoClientOptions } from 'mongodb';
import { uniqueName } from './mongo-adapter.js';
import type { OpenedTestServer } from './server.js';

/** Connection options for a store on the test server, with fresh collection names per call. */
export function storeOptions(server: OpenedTestServer, stem = 'col') {
  return { url: server.url, database: server.database, collection: uniqueName(stem) };
}

/** A connected client that records every command it sends (driver command monitoring). */
export async function monitoredClient(server: OpenedTestServer, options: MongoClientOptions = {}): Promise<{ client: MongoClient; commands: CommandStartedEvent[] }> {
  const commands: CommandStartedEvent[] = [];
  const client = new MongoClient(server.url, { ...options, monitorCommands: true });
  client.on('commandStarted', (event) => commands.push(event));
  await client.connect();
  return { client, commands };
}

/**
 * Commands the client sent, and how many documents their replies carried (`find`, `aggregate`
 * and `getMore` batches): what a listing read. Driver command monitoring; the client needs
 * `monitorCommands: true`.
 */
export function recordCommands(client: MongoClient): { names: string[]; count(): number; documents(): number; reset(): void; stop(): void } {
  const names: string[] = [];
  let documents = 0;
  const started = (event: CommandStartedEvent) => {
    names.push(event.commandName);
  };
  const succeeded = (event: CommandSucceededEvent) => {
    const cursor = (event.reply as { cursor?: { firstBatch?: unknown[]; nextBatch?: unknown[] } } | undefined)?.cursor;
    documents += (cursor?.firstBatch ?? cursor?.nextBatch ?? []).length;
  };
  client.on('commandStarted', started);
  client.on('commandSucceeded', succeeded);
  return {
    names,
    count: () => names.length,
    documents: () => documents,
    reset: () => {
      names.splice(0);
      documents = 0;
    },
    stop: () => {
      client.off('commandStarted', started);
      client.off('commandSucceeded', succeeded);
    },
  };
}

/** Open TCP sockets of this process (what a leaked client would keep). */
export function openSockets(): number {
  return process.getActiveResourcesInfo().filter((resource) => resource === 'TCPSocketWrap').length;
}

/** Waits (bounded) until `condition()` holds; sockets close asynchronously after `close()` resolves. */
export async function eventually(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * The server's time in epoch ms (`hello.localTime`); this process's clock on a server that
 * reports its time nowhere (jongodb), whose stores use this process's clock too.
 */
export async function serverTime(server: OpenedTestServer): Promise<number> {
  const localTime: unknown = (await server.admin.db('admin').command({ hello: 1 })).localTime;
  return localTime instanceof Date ? localTime.getTime() : Date.now();
}

/** A TCP port nothing listens on right now (the OS's pick, released at once). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Forwards connections to `port` (on 127.0.0.1) to the host and port of `url`: the server
 * "comes up" on `port` when this starts. `close()` stops listening and cuts what it forwards.
 */
export async function forwardPort(port: number, url: string): Promise<{ close(): Promise<void> }> {
  const target = new URL(url.replace(/^mongodb:/, 'http:'));
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    close: async () => {
      const closed = new Promise((resolve) => server.close(resolve));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
