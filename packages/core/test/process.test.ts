import { describe, expect, test } from 'vitest';
import { bindProcess, defineProcess, exponentialBackoff, StowageError, type KeyValueStore, type ProcessDefinitionInput, type ProcessEvent } from '../src/index.js';
import { createMemoryStorage, MemoryKeyValueStore, MemoryProcessBackend } from '../src/memory/index.js';

// The ProcessBackend conformance cases (backend and engine) run on the memory adapter in
// memory-conformance.test.ts, with every other contract.

describe('defineProcess', () => {
  const valid = {
    name: 'orders',
    initial: 'new',
    states: { new: { handler: async () => 'paid' as const }, paid: { handler: async () => 'shipped' as const } },
    terminal: ['shipped', 'failed'],
  } satisfies ProcessDefinitionInput<Record<string, never>, 'new' | 'paid', 'shipped' | 'failed'>;

  test('fills in defaults and lists active states in order', () => {
    const definition = defineProcess(valid);
    expect(definition).toMatchObject({ name: 'orders', initial: 'new', deadLetter: 'failed', lease: 30_000, activeStates: ['new', 'paid'] });
    expect(Object.isFrozen(definition)).toBe(true);
  });

  test.each([
    ['an invalid name', { name: 'has space' }],
    ['no states', { states: {} }],
    ['no terminal states', { terminal: [] }],
    ['an initial state without a handler', { initial: 'shipped' }],
    ['a dead-letter state that is not terminal', { deadLetter: 'nowhere' }],
    ['a missing default dead-letter state', { terminal: ['shipped'] }],
    ['a state both active and terminal', { terminal: ['paid', 'failed'] }],
    ['a handler that is not a function', { states: { new: { handler: 'x' } } }],
    ['concurrency 0', { states: { new: { handler: async () => 'paid', concurrency: 0 } } }],
    ['a negative lease', { lease: -1 }],
    ['maxAttempts 0', { retry: { maxAttempts: 0 } }],
    ['a backoff factor below 1', { retry: { backoff: { factor: 0.5 } } }],
    ['jitter above 1', { retry: { backoff: { jitter: 2 } } }],
  ])('rejects %s with E_INVALID_OPTION', (_label, change) => {
    const attempt = () => defineProcess({ ...valid, ...change } as never);
    expect(attempt).toThrow(StowageError);
    expect(attempt).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });

  test('handlers can only name states of the process (checked by tsc)', () => {
    defineProcess({
      name: 'typed',
      initial: 'a',
      states: {
        // @ts-expect-error "c" is not a state of this process
        a: { handler: async () => 'c' },
        b: { handler: async () => ({ to: 'done' }) },
        c2: { handler: async (item) => (item.version > 1 ? { wait: 10 } : 'b') },
      },
      terminal: ['done', 'failed'],
    });
  });
});

describe('exponentialBackoff', () => {
  test('grows by the factor from the initial delay up to the cap', () => {
    const options = { initial: 100, factor: 3, max: 2000, jitter: 0 };
    expect([1, 2, 3, 4, 5].map((attempt) => exponentialBackoff(options, attempt))).toEqual([100, 300, 900, 2000, 2000]);
  });

  test('jitter only ever shortens the delay, by at most its fraction', () => {
    for (let i = 0; i < 200; i++) {
      const delay = exponentialBackoff({ initial: 1000, jitter: 0.5 }, 1);
      expect(delay).toBeGreaterThanOrEqual(500);
      expect(delay).toBeLessThanOrEqual(1000);
    }
  });
});

describe('workers', () => {
  test('a cursor save applied without its answer (a lost connection, a failover) is not reported as another process', async () => {
    const storage = createMemoryStorage();
    const cursors = new MemoryKeyValueStore({ storage });
    // The first cursor save is applied, and its answer lost: the worker sees E_UNAVAILABLE.
    let answerLost = false;
    const lossy = new Proxy(cursors, {
      get(target, property) {
        if (property !== 'compareAndSet') {
          const value = Reflect.get(target, property) as unknown;
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
        }
        return async (...args: Parameters<KeyValueStore['compareAndSet']>) => {
          const version = await target.compareAndSet(...args);
          if (answerLost) return version;
          answerLost = true;
          throw new StowageError('E_UNAVAILABLE', 'connection terminated before the answer');
        };
      },
    });
    const machine = bindProcess(
      new MemoryProcessBackend({ storage }),
      defineProcess({ name: 'lossy', initial: 'a', states: { a: { handler: async () => 'done' as const } }, terminal: ['done', 'failed'] }),
    );
    const events: ProcessEvent[] = [];
    const worker = machine.worker({ name: 'w', cursors: lossy, cursorInterval: 10, pollInterval: 10, onEvent: (event) => events.push(event) });
    await worker.start();
    const saves = () => events.filter((event) => event.type === 'cursor-saved').length;
    // Two items, each moving the cursor; the second save conflicts with the first, lost answer.
    for (const id of ['one', 'two']) {
      const before = saves();
      await machine.start(id, {});
      while ((await machine.get(id))?.state !== 'done' || saves() === before) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await worker.stop();
    expect(answerLost).toBe(true);
    const misreported = events.filter((event) => event.type === 'error' && event.during.includes('another process'));
    expect(misreported).toEqual([]);
  });
});
