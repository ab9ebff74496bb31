/**
 * One process of the hand-off run: a lock provider of its own (its own pool, its own LISTEN
 * connection or change stream), and on each `wait` message that many concurrent
 * `acquire(key, ttl, { wait })` calls on one key. Each waiter, once granted, releases at once.
 * Times are `process.hrtime` (CLOCK_MONOTONIC, the same clock in every process of the machine),
 * in ms. Statements are counted from the driver: every `pg` query, or every Mongo command.
 */
import type { LockHandle, LockProvider } from '@stowage/core';
import pg from 'pg';

export type HandoffTarget =
  | { kind: 'postgres'; url: string; schema: string; wakeups: boolean; poolSize: number; applicationName: string }
  | { kind: 'mongo'; url: string; database: string; poolSize: number };

export type ToChild =
  | { cmd: 'wait'; key: string; waiters: number; ttl: number }
  | { cmd: 'hold'; key: string; ttl: number }
  | { cmd: 'release' }
  | { cmd: 'line'; key: string; waiters: number }
  | { cmd: 'stop' };
export type FromChild =
  | { type: 'ready'; wakeups: boolean }
  | { type: 'held' }
  | { type: 'released'; releasing: number; statements: number }
  | { type: 'waiting' }
  | { type: 'done'; events: { granted: number; releasing: number }[]; statements: number; byKind: Record<string, number> }
  | { type: 'line'; enqueueMs: number; heapBytes: number; leaveMs: number }
  | { type: 'error'; message: string };

const now = (): number => Number(process.hrtime.bigint()) / 1e6;
let statements = 0;
/** Statements sent and not answered yet. */
let inFlight = 0;
/** Statements by kind (the first words of the SQL, or the Mongo command's name), for the report. */
const byKind = new Map<string, number>();

function counted(kind: string): void {
  statements++;
  byKind.set(kind, (byKind.get(kind) ?? 0) + 1);
}

/** `release` when the statement announces a release (pg_notify), else its first words. */
function kindOf(args: unknown[]): string {
  const first = args[0] as string | { text?: string } | undefined;
  const text = (typeof first === 'string' ? first : (first?.text ?? '')).replace(/\s+/g, ' ').trim();
  if (/pg_notify/i.test(text)) return 'release (with NOTIFY)';
  return text.split(' ').slice(0, 3).join(' ');
}

async function open(target: HandoffTarget): Promise<{ provider: LockProvider; wakeups: boolean; close(): Promise<void> }> {
  if (target.kind === 'postgres') {
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    proto.query = function countedQuery(this: object, ...args: unknown[]): unknown {
      counted(kindOf(args));
      const result = original.apply(this, args);
      if (result instanceof Promise) {
        inFlight++;
        const settled = () => void inFlight--;
        result.then(settled, settled);
      }
      return result;
    };
    const { PostgresLockProvider } = await import('@stowage/postgres');
    const provider = new PostgresLockProvider({
      url: target.url,
      schema: target.schema,
      wakeups: target.wakeups,
      cleanupInterval: false,
      applicationName: target.applicationName,
      pool: { max: target.poolSize },
    });
    await provider.ready();
    return { provider, wakeups: provider.capabilities.wakeups === true, close: () => provider.close() };
  }
  const { MongoClient } = await import('mongodb');
  const { MongoLockProvider } = await import('@stowage/mongo');
  const client = await new MongoClient(target.url, { maxPoolSize: target.poolSize, monitorCommands: true }).connect();
  client.on('commandStarted', (event) => {
    counted(event.commandName);
    inFlight++;
  });
  client.on('commandSucceeded', () => void inFlight--);
  client.on('commandFailed', () => void inFlight--);
  const provider = new MongoLockProvider({ client, database: target.database });
  await provider.ready();
  return {
    provider,
    wakeups: provider.capabilities.wakeups === true,
    close: async () => {
      await provider.close();
      await client.close();
    },
  };
}

async function main(): Promise<void> {
  const target = JSON.parse(process.argv[2]!) as HandoffTarget;
  const send = (message: FromChild) => process.send?.(message);
  const opened = await open(target);
  // warm: connections, prepared statements, the LISTEN connection or change stream
  for (let i = 0; i < 3; i++) {
    const handle = await opened.provider.acquire(`handoff-warm:${process.pid}`, 10_000, { wait: 5_000 });
    await handle?.release();
  }
  send({ type: 'ready', wakeups: opened.wakeups });
  let held: LockHandle | null = null;
  const fail = (error: unknown) => send({ type: 'error', message: (error as Error).message });
  process.on('message', (message: ToChild) => {
    switch (message.cmd) {
      case 'stop':
        void opened.close().finally(() => process.exit(0));
        return;
      case 'hold':
        // the holder of a round: takes the free key, and lets it go when told
        void opened.provider.acquire(message.key, message.ttl, { wait: 10_000 }).then((handle) => {
          if (handle === null) return fail(new Error('the holder could not take the free lock'));
          held = handle;
          send({ type: 'held' });
        }, fail);
        return;
      case 'release': {
        const before = statements;
        const releasing = now();
        void held!.release().then(() => send({ type: 'released', releasing, statements: statements - before }), fail);
        return;
      }
      case 'line':
        void line(opened.provider, message).then(send, fail);
        return;
      default:
        void round(opened.provider, message).then(send, fail);
    }
  });
}

async function round(provider: LockProvider, message: Extract<ToChild, { cmd: 'wait' }>): Promise<FromChild> {
  const startStatements = statements;
  const startKinds = new Map(byKind);
  const events: { granted: number; releasing: number }[] = [];
  const done = Array.from({ length: message.waiters }, async () => {
    const handle = await provider.acquire(message.key, message.ttl, { wait: 120_000 });
    if (handle === null) throw new Error('a waiter was not granted the lock within 120 s');
    const granted = now();
    const releasing = now();
    events.push({ granted, releasing });
    await handle.release();
  });
  // The first waiter has asked and had its answer, and waits; the others queued behind it in
  // this process (the provider's line) as soon as they called, without a statement of their own.
  while (statements === startStatements || inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 1));
  process.send?.({ type: 'waiting' } satisfies FromChild);
  await Promise.all(done);
  const kinds = Object.fromEntries([...byKind].map(([kind, n]) => [kind, n - (startKinds.get(kind) ?? 0)]).filter(([, n]) => (n as number) > 0));
  return { type: 'done', events, statements: statements - startStatements, byKind: kinds };
}

/**
 * The lock line at scale: while this process holds the key, `waiters` acquisitions join its
 * line; then close() makes every one of them leave (E_CLOSED). Enqueued means every call has
 * run up to its wait: the calling loop and one turn of the event loop. The provider is closed
 * afterwards, so a process measures one line.
 */
async function line(provider: LockProvider, message: Extract<ToChild, { cmd: 'line' }>): Promise<FromChild> {
  const holder = await provider.acquire(message.key, 600_000);
  if (holder === null) throw new Error('the line\'s holder could not take the free lock');
  const heapBefore = process.memoryUsage().heapUsed;
  const started = performance.now();
  const waiting: Promise<unknown>[] = [];
  for (let i = 0; i < message.waiters; i++) waiting.push(provider.acquire(message.key, 600_000, { wait: 600_000 }).catch((error: unknown) => error));
  await new Promise((resolve) => setImmediate(resolve));
  const enqueueMs = performance.now() - started;
  const heapBytes = process.memoryUsage().heapUsed - heapBefore;
  const leaving = performance.now();
  await provider.close();
  const outcomes = await Promise.all(waiting);
  const leaveMs = performance.now() - leaving;
  const notClosed = outcomes.find((outcome) => (outcome as { code?: string } | null)?.code !== 'E_CLOSED');
  if (notClosed !== undefined) throw new Error(`a waiter of the line ended with ${String(notClosed)} instead of E_CLOSED`);
  return { type: 'line', enqueueMs, heapBytes, leaveMs };
}

main().catch((error: unknown) => {
  process.send?.({ type: 'error', message: (error as Error).stack ?? String(error) } satisfies FromChild);
  process.exit(1);
});
