import { describe, expect, test } from 'vitest';
import { PostgresKeyValueStore, PostgresProcessBackend, connect, postgres } from '../src/index.js';
import { activeSweepers } from '@stowage/core/adapter';

/** Never connected: every case here is decided before anything is sent. */
const url = 'postgresql://postgres@127.0.0.1:1/unused';
const invalid = expect.objectContaining({ code: 'E_INVALID_OPTION' });

describe('retention options', () => {
  test('cleanupInterval: false, 0 or a positive integer of ms a timer can wait; anything else is E_INVALID_OPTION', async () => {
    for (const cleanupInterval of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, '60000', true, null]) {
      expect(() => new PostgresKeyValueStore({ url, cleanupInterval: cleanupInterval as never }), String(cleanupInterval)).toThrow(invalid);
      expect(() => connect({ url, cleanupInterval: cleanupInterval as never }), String(cleanupInterval)).toThrow(invalid);
    }
    for (const cleanupInterval of [false, 0, 1, 2 ** 31 - 1] as const) {
      await new PostgresKeyValueStore({ url, table: 'retention_options', cleanupInterval }).close();
    }
    expect(activeSweepers('retention_options')).toEqual([]);
  });

  test('historyRetention and snapshotRetention.finishedAfter are positive durations', async () => {
    for (const historyRetention of [0, -5, 1.5, '1d', null]) {
      expect(() => new PostgresProcessBackend({ url, historyRetention: historyRetention as never }), String(historyRetention)).toThrow(invalid);
    }
    for (const snapshotRetention of [5, null, [], { finishedAfter: 0 }, { finishedAfter: '1d' }]) {
      expect(() => postgres({ url, snapshotRetention: snapshotRetention as never }), JSON.stringify(snapshotRetention)).toThrow(invalid);
    }
    // A retention without the background sweeper: the methods run it on demand.
    const backend = new PostgresProcessBackend({ url, historyRetention: 86_400_000, cleanupInterval: false, transitionsTable: 'retention_log' });
    const store = postgres({ url, snapshotRetention: { finishedAfter: 86_400_000 }, cleanupInterval: false, table: 'retention_snapshots' });
    expect([...activeSweepers('retention_log'), ...activeSweepers('retention_snapshots')]).toEqual([]);
    await Promise.all([backend.close(), store.close()]);
  });
});
