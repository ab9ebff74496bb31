/**
 * What the adapter kit publishes on `node:diagnostics_channel`, and that it publishes nothing
 * (and loads no OpenTelemetry module) while nobody subscribes.
 */
import { execFile } from 'node:child_process';
import { channel, tracingChannel } from 'node:diagnostics_channel';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import {
  STOWAGE_CHANNELS,
  StowageError,
  type BatchMessage,
  type CacheLookupMessage,
  type LockWaitMessage,
  type OperationMessage,
  type ProcessClaimMessage,
  type ProcessTransitionMessage,
} from '../../src/index.js';
import { runWorkload } from './workload.js';

const MESSAGE_CHANNELS = [
  STOWAGE_CHANNELS.cacheLookup,
  STOWAGE_CHANNELS.lockWait,
  STOWAGE_CHANNELS.batch,
  STOWAGE_CHANNELS.processClaim,
  STOWAGE_CHANNELS.processTransition,
];
const TRACING_CHANNELS = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'].map((event) => `tracing:${STOWAGE_CHANNELS.operation}:${event}`);
const ALL_CHANNELS = [...MESSAGE_CHANNELS, ...TRACING_CHANNELS];

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/**
 * Counts every `publish` and `runStores` on the stowage channels (the only ways a message
 * leaves a channel), whether or not anyone subscribes.
 */
function countSends(): Map<string, number> {
  const counts = new Map(ALL_CHANNELS.map((name) => [name, 0]));
  for (const name of ALL_CHANNELS) {
    const target = channel(name) as unknown as Record<'publish' | 'runStores', (...args: unknown[]) => unknown>;
    for (const method of ['publish', 'runStores'] as const) {
      target[method] = function (this: typeof target, ...args: unknown[]) {
        counts.set(name, counts.get(name)! + 1);
        // The prototype changes when the channel gains its first subscriber: look it up now.
        return (Object.getPrototypeOf(this) as typeof target)[method].apply(this, args);
      };
      cleanups.push(() => delete (target as Partial<typeof target>)[method]);
    }
  }
  return counts;
}

function collect<T>(name: string): T[] {
  const messages: T[] = [];
  const onMessage = (message: unknown) => void messages.push(message as T);
  channel(name).subscribe(onMessage);
  cleanups.push(() => channel(name).unsubscribe(onMessage));
  return messages;
}

describe('without subscribers', () => {
  it('the kit sends nothing on any stowage channel during a run that reaches every publishing site', async () => {
    expect(ALL_CHANNELS.filter((name) => channel(name).hasSubscribers)).toEqual([]);
    const sends = countSends();
    await runWorkload();
    expect(Object.fromEntries(sends)).toEqual(Object.fromEntries(ALL_CHANNELS.map((name) => [name, 0])));
  });

  it('a process that uses the stores loads no @opentelemetry module (and the check sees one that does)', async () => {
    const run = promisify(execFile);
    const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
    const child = async (...args: string[]) => {
      const { stdout } = await run(process.execPath, ['--import', here('./ts-hooks.mjs'), here('./off.child.mjs'), ...args]);
      return JSON.parse(stdout) as { resolved: number; opentelemetry: string[] };
    };
    const plain = await child();
    expect(plain.resolved).toBeGreaterThan(20); // the hook saw the stores' imports
    expect(plain.opentelemetry).toEqual([]);
    expect((await child('--load-telemetry')).opentelemetry).toEqual(['@opentelemetry/api']);
  });
});

describe('with subscribers', () => {
  it('each store call is one trace named by its operation, with the key or the batch size and the mapped error', async () => {
    const sends = countSends();
    const started: OperationMessage[] = [];
    const ended: OperationMessage[] = [];
    const handlers = {
      start: (message: OperationMessage) => void started.push(message),
      end: () => {},
      asyncStart: () => {},
      asyncEnd: (message: OperationMessage) => void ended.push(message),
      error: () => {},
    };
    const operations = tracingChannel<unknown, OperationMessage>(STOWAGE_CHANNELS.operation);
    operations.subscribe(handlers);
    cleanups.push(() => operations.unsubscribe(handlers));

    await runWorkload();

    expect(sends.get(`tracing:${STOWAGE_CHANNELS.operation}:start`)).toBeGreaterThan(0); // the counter sees real sends
    expect(ended).toHaveLength(started.length);
    const names = started.map((message) => message.operation);
    expect(names.filter((name) => name === 'kv.set')).toHaveLength(3);
    expect(new Set(names)).toEqual(
      new Set([
        'kv.set',
        'kv.get',
        'kv.getMany',
        'kv.compareAndSet',
        'cache.get',
        'cache.set',
        'cache.getOrSet',
        'locks.acquire',
        'locks.release',
        'locks.withLock',
        'process.createItem',
        'process.claim',
        'process.transition',
      ]),
    );
    const kvGet = started.find((message) => message.operation === 'kv.get')!;
    expect(kvGet.store).toEqual({ name: 'MemoryKeyValueStore', system: 'memory' });
    expect(kvGet.key).toBe('a');
    const getMany = started.find((message) => message.operation === 'kv.getMany')!;
    expect(getMany).toMatchObject({ batchSize: 3 });
    expect(getMany.key).toBeUndefined();
    const conflict = ended.find((message) => message.operation === 'kv.compareAndSet')!;
    expect(conflict.error).toBeInstanceOf(StowageError);
    expect(conflict.error).toMatchObject({ code: 'E_VERSION_CONFLICT' });
    expect(ended.filter((message) => 'error' in message)).toEqual([conflict]);
    // The two handles' releases, and withLock's own, which runs inside the withLock call.
    expect(names.filter((name) => name === 'locks.release')).toHaveLength(3);
  });

  it('coalesced batches, cache lookups, lock waits and process claims and transitions', async () => {
    const batches = collect<BatchMessage>(STOWAGE_CHANNELS.batch);
    const lookups = collect<CacheLookupMessage>(STOWAGE_CHANNELS.cacheLookup);
    const waits = collect<LockWaitMessage>(STOWAGE_CHANNELS.lockWait);
    const claims = collect<ProcessClaimMessage>(STOWAGE_CHANNELS.processClaim);
    const transitions = collect<ProcessTransitionMessage>(STOWAGE_CHANNELS.processTransition);

    await runWorkload();

    const sizes = batches.map(({ operation, size }) => `${operation}×${size}`);
    expect(sizes).toEqual(['kv.set×3', 'kv.get×2', 'kv.get×1']);
    expect(lookups.map(({ store, hit }) => `${store.name} ${hit ? 'hit' : 'miss'}`)).toEqual([
      'MemoryCacheProvider miss',
      'MemoryCacheProvider hit',
      'MemoryCacheProvider miss',
    ]);
    expect(waits.map(({ acquired, wakeups }) => ({ acquired, wakeups }))).toEqual([
      { acquired: true, wakeups: 0 },
      { acquired: true, wakeups: 1 }, // woken by the release, long before its 5 s poll
      { acquired: true, wakeups: 0 }, // withLock
    ]);
    expect(waits.every(({ waited }) => waited >= 0)).toBe(true);
    expect(claims).toHaveLength(1);
    expect(claims[0]).toMatchObject({ process: 'orders', state: 'new', store: { system: 'memory' } });
    expect(claims[0]!.lag).toBeGreaterThanOrEqual(0);
    expect(transitions.map(({ from, to, kind }) => ({ from, to, kind }))).toEqual([
      { from: null, to: 'new', kind: 'create' },
      { from: 'new', to: 'paid', kind: 'advance' },
    ]);
  });
});
