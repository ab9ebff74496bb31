/**
 * One error identity across builds: a CommonJS library that `require`s `@stowage/core` beside an
 * ESM application that `import`s it loads two StowageError classes (the same happens with two
 * copies of core after version drift). `isStowageError` and `instanceof StowageError` must
 * answer the same for an error of either, both ways, or retry logic keyed on `E_UNAVAILABLE`
 * silently stops retrying.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import * as esm from '@stowage/core';
import { MemoryKeyValueStore } from '@stowage/core/memory';

const require = createRequire(import.meta.url);
const cjs = require('@stowage/core') as typeof esm;
const cjsMemory = require('@stowage/core/memory') as { MemoryKeyValueStore: typeof MemoryKeyValueStore };

describe('StowageError across the ESM and CommonJS builds', () => {
  it('loads two different classes (the premise)', () => {
    expect(cjs.StowageError).not.toBe(esm.StowageError);
  });

  it.each([
    ['an ESM error, seen from CommonJS', () => new esm.StowageError('E_UNAVAILABLE', 'down'), cjs],
    ['a CommonJS error, seen from ESM', () => new cjs.StowageError('E_UNAVAILABLE', 'down'), esm],
  ] as const)('%s is a StowageError with its code', (_name, create, other) => {
    const error = create();
    expect(other.isStowageError(error)).toBe(true);
    expect(other.isStowageError(error, 'E_UNAVAILABLE')).toBe(true);
    expect(other.isStowageError(error, 'E_TIMEOUT')).toBe(false);
    expect(error instanceof other.StowageError).toBe(true);
    expect(error instanceof Error).toBe(true);
  });

  it('holds for errors an adapter of the other build throws', async () => {
    const store = new cjsMemory.MemoryKeyValueStore();
    const error = await store.get('').catch((failure: unknown) => failure);
    expect(esm.isStowageError(error, 'E_INVALID_KEY')).toBe(true);
    const esmStore = new MemoryKeyValueStore();
    await esmStore.close();
    const closed = await esmStore.get('k').catch((failure: unknown) => failure);
    expect(cjs.isStowageError(closed, 'E_CLOSED')).toBe(true);
  });

  it('is not fooled by look-alikes', () => {
    const lookalike = Object.assign(new Error('down'), { name: 'StowageError', code: 'E_UNAVAILABLE' });
    expect(esm.isStowageError(lookalike)).toBe(false);
    expect(cjs.isStowageError({ code: 'E_UNAVAILABLE' })).toBe(false);
    expect(esm.isStowageError(null)).toBe(false);
  });
});
