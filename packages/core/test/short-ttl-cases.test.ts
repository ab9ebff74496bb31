import { describe, expect, it } from 'vitest';
import { cacheCases } from '../src/conformance/cases/cache.js';
import { idempotencyCases } from '../src/conformance/cases/idempotency.js';
import { ConformanceSession, type ContractCases } from '../src/conformance/harness.js';
import { SHORT_TTL, sleep, withinShortTtl } from '../src/conformance/helpers.js';
import type { ConformanceContext } from '../src/conformance/types.js';
import { MemoryCacheProvider, MemoryIdempotencyStore, createMemoryStorage } from '../src/memory/index.js';

/**
 * The conformance cases that read an entry written with SHORT_TTL before it expires must not
 * fail because the machine was slow for a moment (the CI machine is loaded), and must still
 * fail a store that loses a live entry. Here the memory adapter stands in for a backend: a
 * load spike is its first read stalling past the ttl; a broken store is one whose reads find
 * nothing.
 */

/** Runs one case of `cases` on `context`, as the harness would (a skip is an error here). */
async function runCase(cases: ContractCases, name: string, context: ConformanceContext): Promise<void> {
  const found = cases.cases.find((c) => c.name === name);
  if (!found) throw new Error(`no case "${name}"`);
  const session = new ConformanceSession(context, found.needs ?? [], (reason) => {
    throw new Error(`skipped: ${reason}`);
  });
  try {
    await found.run(session);
  } finally {
    await session.closeAll();
  }
}

/** `store` with `method` rewritten by `wrap` (the store's own methods keep their `this`). */
function rewrite<T extends object>(store: T, method: string, wrap: (call: (...args: unknown[]) => Promise<unknown>) => (...args: unknown[]) => Promise<unknown>): T {
  return new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      const bound = (value as (...args: unknown[]) => Promise<unknown>).bind(target);
      return property === method ? wrap(bound) : bound;
    },
  });
}

/**
 * A load spike: the first `method` call of any store opened through it is delayed past
 * SHORT_TTL, before it runs (a read) or after it returned (a write).
 */
function firstCallStalls(when: 'before' | 'after') {
  let stalled = false;
  const stall = async () => {
    if (stalled) return;
    stalled = true;
    await sleep(SHORT_TTL + 100);
  };
  return <T extends object>(store: T, method: string): T =>
    rewrite(store, method, (call) => async (...args) => {
      if (when === 'before') await stall();
      const result = await call(...args);
      if (when === 'after') await stall();
      return result;
    });
}

/** A store that loses live entries: `method` finds nothing. */
const findsNothing = <T extends object>(store: T, method: string): T => rewrite(store, method, () => async () => null);

const CACHE_TTL = 'TTL: entries expire on the store clock; defaultTtl applies when set has none';
const CACHE_GET_OR_SET = 'getOrSet: the ttl applies to the loaded value';
const IDEMPOTENCY_TTL = 'set with a ttl reports expiresAt on the store clock and expires';
const IDEMPOTENCY_COMPLETE = 'complete with a ttl: the completed record expires and the key can be reserved again';

describe('cases that read before a short ttl runs out', () => {
  const cacheContext = (wrap: <T extends object>(store: T, method: string) => T, method: string): ConformanceContext => {
    const storage = createMemoryStorage();
    return { cache: async (options) => wrap(new MemoryCacheProvider({ ...options, storage }), method) };
  };
  const idempotencyContext = (wrap: <T extends object>(store: T, method: string) => T, method: string): ConformanceContext => {
    const storage = createMemoryStorage();
    return { idempotency: async () => wrap(new MemoryIdempotencyStore({ storage }), method) };
  };

  it('pass when the first read comes after the ttl because the machine stalled', async () => {
    await runCase(cacheCases, CACHE_TTL, cacheContext(firstCallStalls('before'), 'get'));
    await runCase(cacheCases, CACHE_GET_OR_SET, cacheContext(firstCallStalls('after'), 'getOrSet'));
    await runCase(idempotencyCases, IDEMPOTENCY_TTL, idempotencyContext(firstCallStalls('before'), 'get'));
    await runCase(idempotencyCases, IDEMPOTENCY_COMPLETE, idempotencyContext(firstCallStalls('after'), 'complete'));
  });

  it('fail a store whose reads lose live entries', async () => {
    await expect(runCase(cacheCases, CACHE_TTL, cacheContext(findsNothing, 'get'))).rejects.toThrow();
    await expect(runCase(idempotencyCases, IDEMPOTENCY_TTL, idempotencyContext(findsNothing, 'get'))).rejects.toThrow();
  });

  it('withinShortTtl fails at once when a run fails within the ttl', async () => {
    let runs = 0;
    const lost = new Error('a live entry was missing');
    await expect(
      withinShortTtl(async () => {
        runs++;
        throw lost;
      }),
    ).rejects.toBe(lost);
    expect(runs).toBe(1);
  });
});
