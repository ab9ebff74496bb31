/**
 * The kit's coalescing, observed on the in-memory adapter with its backend operations
 * counted: concurrent point calls of one tick go out as one batch, a lone call goes out
 * alone, every caller gets its own outcome, and `coalesce: false` turns it off.
 */
import { describe, expect, it } from 'vitest';
import { isStowageError, StowageError } from '../src/errors.js';
import type { KeyValueWriteOp } from '../src/adapter/kv.js';
import { MemoryKeyValueStore, createMemoryStorage } from '../src/memory/index.js';

/** A memory store that counts what reaches its backend operations, and can refuse one value. */
class CountingStore extends MemoryKeyValueStore {
  readonly calls: string[] = [];
  refuse: string | undefined;

  protected override _get(key: string) {
    this.calls.push('get');
    return super._get(key);
  }
  protected override _getMany(keys: readonly string[]) {
    this.calls.push(`getMany:${keys.length}`);
    return super._getMany(keys);
  }
  protected override _existsMany(keys: readonly string[]) {
    this.calls.push(`existsMany:${keys.length}`);
    return super._existsMany(keys);
  }
  protected override async _setMany(writes: readonly KeyValueWriteOp[]) {
    this.calls.push(`setMany:${writes.map((write) => write.key).join(',')}`);
    if (writes.some((write) => write.value === this.refuse)) throw new Error('the database refused a value');
    return super._setMany(writes);
  }
  protected override _deleteEach(keys: readonly string[]) {
    this.calls.push(`deleteEach:${keys.length}`);
    return super._deleteEach(keys);
  }
}

describe('coalescing', () => {
  it('32 concurrent gets go out as one batch, each with its own value; a lone get goes out alone', async () => {
    const kv = new CountingStore();
    await kv.setMany(Array.from({ length: 32 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })));
    kv.calls.length = 0;
    const values = await Promise.all(Array.from({ length: 32 }, (_, i) => kv.get(`k${i}`)));
    expect(values).toEqual(Array.from({ length: 32 }, (_, i) => `v${i}`));
    expect(kv.calls).toEqual(['getMany:32']);
    kv.calls.length = 0;
    expect(await kv.get('k3')).toBe('v3');
    expect(kv.calls).toEqual(['get']);
  });

  it('calls made in separate callbacks of one event-loop turn (as a server receives requests) go out as one batch', async () => {
    const kv = new CountingStore();
    await kv.setMany(Array.from({ length: 8 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })));
    kv.calls.length = 0;
    // Each callback is its own macrotask, as each request's data event is; Node drains the
    // microtask queue between them, so only a flush at the end of the turn sees all eight.
    const values = await Promise.all(
      Array.from({ length: 8 }, (_, i) => new Promise((resolve) => setImmediate(() => resolve(kv.get(`k${i}`))))),
    );
    expect(values).toEqual(Array.from({ length: 8 }, (_, i) => `v${i}`));
    expect(kv.calls).toEqual(['getMany:8']);
  });

  it('callers that await in a loop batch up on their own after the first round', async () => {
    const kv = new CountingStore();
    await kv.set('hot', 'x');
    kv.calls.length = 0;
    await Promise.all(Array.from({ length: 8 }, async () => {
      for (let i = 0; i < 10; i++) expect(await kv.get('hot')).toBe('x');
    }));
    expect(kv.calls).toEqual(Array.from({ length: 10 }, () => 'getMany:8'));
  });

  it('exists, set and delete coalesce too; duplicate deletes count once, duplicate sets keep the last value', async () => {
    const kv = new CountingStore();
    await Promise.all([kv.set('b', '1'), kv.set('a', '1'), kv.set('b', '2')]);
    expect(kv.calls).toEqual(['setMany:a,b']);
    expect(await kv.get('b')).toBe('2');
    kv.calls.length = 0;
    expect(await Promise.all([kv.exists('a'), kv.exists('nope')])).toEqual([true, false]);
    expect(await Promise.all([kv.delete('a'), kv.delete('a'), kv.delete('nope')])).toEqual([true, false, false]);
    expect(kv.calls).toEqual(['existsMany:2', 'deleteEach:2']);
  });

  it('one value the backend refuses fails only its own call: the batch is run again call by call', async () => {
    const kv = new CountingStore();
    kv.refuse = 'poison';
    const outcomes = await Promise.allSettled([kv.set('a', 'ok'), kv.set('b', 'poison'), kv.set('c', 'ok')]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(await kv.getMany(['a', 'b', 'c'])).toEqual(['ok', null, 'ok']);
  });

  it('an unavailable backend fails the whole batch once, without retrying call by call', async () => {
    const storage = createMemoryStorage();
    class Down extends CountingStore {
      protected override async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
        this.calls.push(`getMany:${keys.length}`);
        throw new StowageError('E_UNAVAILABLE', 'down');
      }
    }
    const kv = new Down({ storage });
    const outcomes = await Promise.allSettled([kv.get('a'), kv.get('b')]);
    expect(outcomes.every((outcome) => outcome.status === 'rejected' && isStowageError(outcome.reason, 'E_UNAVAILABLE'))).toBe(true);
    expect(kv.calls).toEqual(['getMany:2']);
  });

  it('coalesce: false sends every call on its own', async () => {
    const kv = new CountingStore({ coalesce: false });
    await Promise.all([kv.get('a'), kv.get('b')]);
    expect(kv.calls).toEqual(['get', 'get']);
    expect(() => new CountingStore({ coalesce: 'yes' as never })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });
});
