/**
 * Opens stowage's Postgres adapter on a pool the bench owns, so that its connections are
 * observed and sized exactly like the raw baseline's.
 */
import { PostgresCacheProvider, PostgresKeyValueStore, PostgresLockProvider, postgres } from '@stowage/postgres';
import type pg from 'pg';
import { ANCHOR_CACHE_PREFIX, ANCHOR_TABLES } from '../anchor-postgres.ts';
import type { AnchorStores, StowageSet } from '../ops.ts';

export interface OpenedStowage {
  set: StowageSet;
  /** The key-value store and cache on the anchor tables, with coalescing (default) and without. */
  anchor: AnchorStores;
  anchorVariant: AnchorStores;
  close(): Promise<void>;
}

export async function openStowagePostgres(pool: pg.Pool, schema: string): Promise<OpenedStowage> {
  // No background sweeper: its statements would land in the measured windows and their counts.
  const shared = { pool, schema, cleanupInterval: false } as const;
  const set: StowageSet = {
    kv: new PostgresKeyValueStore(shared),
    snapshots: postgres({ ...shared, lock: {} }),
    locks: new PostgresLockProvider(shared),
    cache: new PostgresCacheProvider({ ...shared, prefix: 'bench' }),
  };
  const anchorOn = (coalesce: boolean): AnchorStores => ({
    kv: new PostgresKeyValueStore({ ...shared, table: ANCHOR_TABLES.kv, coalesce }),
    cache: new PostgresCacheProvider({ ...shared, table: ANCHOR_TABLES.cache, prefix: ANCHOR_CACHE_PREFIX, coalesce }),
  });
  const anchor = anchorOn(true);
  const anchorVariant = anchorOn(false);
  // the tables exist before the bench fills them
  await (anchor.kv as PostgresKeyValueStore).ready();
  await (anchor.cache as PostgresCacheProvider).ready();
  const all = [...Object.values(set), ...Object.values(anchor), ...Object.values(anchorVariant)];
  return {
    set,
    anchor,
    anchorVariant,
    close: async () => {
      await Promise.all(all.map((resource) => resource.close()));
    },
  };
}

/** A lock provider on its own pool; `wakeups: false` polls only (no LISTEN connection). */
export async function openPostgresLockProvider(pool: pg.Pool, schema: string, wakeups: boolean): Promise<PostgresLockProvider> {
  const provider = new PostgresLockProvider({ pool, schema, wakeups, cleanupInterval: false });
  await provider.ready();
  return provider;
}
