import { expect } from 'vitest';
import type { Checkpoint } from '../../contracts/checkpoints.js';
import type { JsonValue } from '../../json.js';
import { richCodec } from '../../json.js';
import { defineCases } from '../harness.js';
import { HOSTILE_KEYS, INVALID_KEYS, JSON_VALUES, NON_JSON_VALUES, ONE_MB_STRING, expectReject, parallel } from '../helpers.js';

function checkpoint(taskId: string, sequence: number, extra: Partial<Checkpoint> = {}): Checkpoint {
  return {
    id: `${taskId}#${sequence}`,
    taskId,
    sequence,
    timestamp: 1_700_000_000_000 + sequence,
    progress: sequence / 10,
    data: { step: sequence, items: [sequence, `item-${sequence}`] },
    ...extra,
  };
}

export const checkpointCases = defineCases('CheckpointStore', (it) => {
  it('save then load by id round-trips; missing ids and tasks read null or empty', async (s) => {
    const store = await s.checkpoints();
    const saved = checkpoint('task', 1, { estimatedTimeRemaining: 5_000 });
    await store.save(saved);
    expect(await store.load(saved.id)).toStrictEqual(saved);
    expect(await store.load('missing')).toBeNull();
    expect(await store.loadLatest('no-such-task')).toBeNull();
    expect(await store.list('no-such-task')).toEqual([]);
  });

  it('estimatedTimeRemaining stays absent when not given', async (s) => {
    const store = await s.checkpoints();
    await store.save(checkpoint('task', 1));
    const loaded = await store.load('task#1');
    expect(loaded).toStrictEqual(checkpoint('task', 1));
    expect(loaded).not.toHaveProperty('estimatedTimeRemaining');
  });

  it('list is ascending by sequence and loadLatest is the highest sequence', async (s) => {
    const store = await s.checkpoints();
    for (const sequence of [3, 1, 10, 2]) await store.save(checkpoint('task', sequence));
    await store.save(checkpoint('other-task', 99));
    expect((await store.list('task')).map((c) => c.sequence)).toEqual([1, 2, 3, 10]);
    expect(await store.loadLatest('task')).toStrictEqual(checkpoint('task', 10));
    expect((await store.list('other-task')).map((c) => c.sequence)).toEqual([99]);
  });

  it('cleanup keeps the keepCount highest sequences of the task only', async (s) => {
    const store = await s.checkpoints();
    for (let sequence = 1; sequence <= 5; sequence++) await store.save(checkpoint('task', sequence));
    await store.save(checkpoint('other', 1));
    await store.cleanup('task', 2);
    expect((await store.list('task')).map((c) => c.sequence)).toEqual([4, 5]);
    expect(await store.load('task#1')).toBeNull();
    await store.cleanup('task', 10);
    expect((await store.list('task')).map((c) => c.sequence)).toEqual([4, 5]);
    await store.cleanup('task', 0);
    expect(await store.list('task')).toEqual([]);
    expect(await store.list('other')).toHaveLength(1);
    await expectReject(() => store.cleanup('task', -1), 'E_INVALID_OPTION', 'keepCount -1');
    await expectReject(() => store.cleanup('task', 1.5), 'E_INVALID_OPTION', 'keepCount 1.5');
  });

  it('deleteAll removes every checkpoint of the task and nothing else; sequences can then be reused', async (s) => {
    const store = await s.checkpoints();
    for (let sequence = 1; sequence <= 3; sequence++) await store.save(checkpoint('task', sequence));
    await store.save(checkpoint('task_other', 1));
    await store.deleteAll('task');
    await store.deleteAll('never-saved');
    expect(await store.list('task')).toEqual([]);
    expect(await store.loadLatest('task')).toBeNull();
    expect(await store.list('task_other')).toHaveLength(1);
    await store.save(checkpoint('task', 1));
    expect(await store.list('task')).toHaveLength(1);
  });

  it('a duplicate (taskId, sequence) is E_VERSION_CONFLICT and keeps the original', async (s) => {
    const store = await s.checkpoints();
    const original = checkpoint('task', 1);
    await store.save(original);
    await expectReject(
      () => store.save({ ...checkpoint('task', 1), id: 'different-id', data: 'overwrite attempt' }),
      'E_VERSION_CONFLICT',
      'duplicate sequence',
    );
    expect(await store.list('task')).toStrictEqual([original]);
    expect(await store.load('different-id')).toBeNull();
  });

  it('a duplicate id is E_VERSION_CONFLICT and keeps the original', async (s) => {
    const store = await s.checkpoints();
    const original = checkpoint('task', 1);
    await store.save(original);
    await expectReject(() => store.save({ ...checkpoint('task', 2), id: original.id }), 'E_VERSION_CONFLICT', 'duplicate id');
    await expectReject(() => store.save({ ...checkpoint('elsewhere', 7), id: original.id }), 'E_VERSION_CONFLICT', 'id of another task');
    expect(await store.load(original.id)).toStrictEqual(original);
    expect(await store.list('task')).toHaveLength(1);
    expect(await store.list('elsewhere')).toEqual([]);
  });

  it('of concurrent saves of one sequence exactly one wins', async (s) => {
    const stores = await s.many(4, (session) => session.checkpoints());
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => stores[i % 4]!.save({ ...checkpoint('task', 1), id: `writer-${i}` })),
    );
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    for (const result of results) {
      if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'E_VERSION_CONFLICT' });
    }
    expect(await stores[0]!.list('task')).toHaveLength(1);
  });

  it('1 MB of data and any JSON value round-trip', async (s) => {
    const store = await s.checkpoints();
    const big = checkpoint('task', 1, { data: { blob: ONE_MB_STRING, list: Array.from({ length: 1000 }, (_, i) => i) } });
    await store.save(big);
    expect(await store.load(big.id)).toStrictEqual(big);
    const values = Object.fromEntries(JSON_VALUES.map(([label, value]) => [label, value])) as JsonValue;
    await store.save(checkpoint('task', 2, { data: values }));
    expect((await store.loadLatest('task'))!.data).toStrictEqual(values);
    await store.save(checkpoint('task', 3, { data: null }));
    expect((await store.load('task#3'))!.data).toBeNull();
  });

  it('a codec carries richer data (Date, BigInt, Map) on every backend; without one such data is E_INVALID_VALUE', async (s) => {
    const rich = await s.checkpoints({ codec: richCodec });
    const data = { at: new Date('2024-01-02T03:04:05.678Z'), big: 12345678901234567890n, seen: new Map([['a', 1]]) };
    await rich.save(checkpoint('rich', 1, { id: 'rich-1', data: data as never }));
    const loaded = await rich.load('rich-1');
    expect(loaded?.data).toEqual(data);
    expect((loaded?.data as unknown as typeof data).at).toBeInstanceOf(Date);
    expect((await rich.loadLatest('rich'))?.data).toEqual(data);
    const strict = await s.checkpoints();
    await expectReject(() => strict.save(checkpoint('strict', 1, { id: 'strict-1', data: data as never })), 'E_INVALID_VALUE', 'Date without a codec');
    expect(await strict.load('strict-1')).toBeNull();
  });

  it("onDuplicate: 'replace' overwrites a re-saved checkpoint (go-go-scope's interval auto-save) and keeps one per sequence", async (s) => {
    const store = await s.checkpoints({ onDuplicate: 'replace' });
    for (let save = 1; save <= 5; save++) await store.save(checkpoint('auto', 1, { progress: save / 10, data: { save } }));
    expect(await store.list('auto')).toEqual([checkpoint('auto', 1, { progress: 0.5, data: { save: 5 } })]);
    await store.save(checkpoint('auto', 1, { id: 'other-id', data: { moved: true } }));
    expect((await store.list('auto')).map((c) => [c.id, c.data])).toEqual([['other-id', { moved: true }]]);
    expect(await store.load('auto#1')).toBeNull();
    const strict = await s.checkpoints();
    await expectReject(() => strict.save(checkpoint('auto', 1, { id: 'other-id' })), 'E_VERSION_CONFLICT', 're-save without replace');
    await expectReject(() => s.checkpoints({ onDuplicate: 'sometimes' as never }), 'E_INVALID_OPTION', 'unknown onDuplicate');
  });

  it('malformed checkpoints are rejected and nothing is stored', async (s) => {
    const store = await s.checkpoints();
    const bad: [string, unknown, string][] = [
      ['null', null, 'E_INVALID_VALUE'],
      ['missing id', { ...checkpoint('task', 1), id: undefined }, 'E_INVALID_KEY'],
      ['empty taskId', { ...checkpoint('task', 1), taskId: '' }, 'E_INVALID_KEY'],
      ['fractional sequence', checkpoint('task', 1.5), 'E_INVALID_VALUE'],
      ['negative sequence', checkpoint('task', -1), 'E_INVALID_VALUE'],
      ['string sequence', { ...checkpoint('task', 1), sequence: '1' }, 'E_INVALID_VALUE'],
      ['NaN progress', { ...checkpoint('task', 1), progress: Number.NaN }, 'E_INVALID_VALUE'],
      ['missing timestamp', { ...checkpoint('task', 1), timestamp: undefined }, 'E_INVALID_VALUE'],
      ['string estimatedTimeRemaining', { ...checkpoint('task', 1), estimatedTimeRemaining: 'soon' }, 'E_INVALID_VALUE'],
      ...NON_JSON_VALUES.map(([label, value]): [string, unknown, string] => [`data: ${label}`, { ...checkpoint('task', 1), data: value }, 'E_INVALID_VALUE']),
    ];
    for (const [label, value, code] of bad) {
      await expectReject(() => store.save(value as Checkpoint), code as 'E_INVALID_VALUE', label);
    }
    expect(await store.list('task')).toEqual([]);
  });

  it('hostile task ids and checkpoint ids work; invalid ones reject with E_INVALID_KEY', async (s) => {
    const store = await s.checkpoints();
    await parallel(HOSTILE_KEYS.length, (i) => store.save({ ...checkpoint(HOSTILE_KEYS[i]!, 1), id: HOSTILE_KEYS[i]! }));
    for (const key of HOSTILE_KEYS) {
      expect((await store.loadLatest(key))?.id, JSON.stringify(key)).toBe(key);
      expect(await store.list(key)).toHaveLength(1);
    }
    for (const [label, key] of INVALID_KEYS) {
      await expectReject(() => store.load(key as string), 'E_INVALID_KEY', `load(${label})`);
      await expectReject(() => store.loadLatest(key as string), 'E_INVALID_KEY', `loadLatest(${label})`);
      await expectReject(() => store.list(key as string), 'E_INVALID_KEY', `list(${label})`);
      await expectReject(() => store.cleanup(key as string, 1), 'E_INVALID_KEY', `cleanup(${label})`);
      await expectReject(() => store.deleteAll(key as string), 'E_INVALID_KEY', `deleteAll(${label})`);
    }
  });

  it('loaded checkpoints are copies', async (s) => {
    const store = await s.checkpoints();
    const saved = checkpoint('task', 1);
    await store.save(saved);
    (saved.data as { step: number }).step = 42;
    const loaded = await store.load('task#1');
    (loaded!.data as { step: number }).step = 43;
    expect(await store.load('task#1')).toStrictEqual(checkpoint('task', 1));
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const stores = await s.many(5, (session) => session.checkpoints());
    await parallel(5, (i) => stores[i]!.save(checkpoint('task', i)));
    expect(await stores[0]!.list('task')).toHaveLength(5);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const store = await s.checkpoints();
    await Promise.all([store.close(), store.close()]);
    await store.close();
    const calls: [string, () => unknown][] = [
      ['save', () => store.save(checkpoint('task', 1))],
      ['loadLatest', () => store.loadLatest('task')],
      ['load', () => store.load('task#1')],
      ['list', () => store.list('task')],
      ['cleanup', () => store.cleanup('task', 1)],
      ['deleteAll', () => store.deleteAll('task')],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
  });
});
