import type { CommandStartedEvent, MongoClient } from 'mongodb';
import { uniqueName } from './mongo-adapter.js';
import type { OpenedTestServer } from './server.js';

/** Connection options for a store on the test server, with fresh collection names per call. */
export function storeOptions(server: OpenedTestServer, stem = 'col') {
  return { url: server.url, database: server.database, collection: uniqueName(stem) };
}

/** Commands the client sent (driver command monitoring; the client needs `monitorCommands: true`). */
export function recordCommands(client: MongoClient): { names: string[]; count(): number; reset(): void; stop(): void } {
  const names: string[] = [];
  const listener = (event: CommandStartedEvent) => {
    names.push(event.commandName);
  };
  client.on('commandStarted', listener);
  return {
    names,
    count: () => names.length,
    reset: () => void names.splice(0),
    stop: () => void client.off('commandStarted', listener),
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
