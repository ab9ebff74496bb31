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
  const set: StowageSet = {
    kv: new PostgresKeyValueStore({ pool, schema }),
    snapshots: postgres({ pool, schema, lock: {} }),
    locks: new PostgresLockProvider({ pool, schema }),
    cache: new PostgresCacheProvider({ pool, schema, prefix: 'bench' }),
  };
  const anchorOn = (coalesce: boolean): AnchorStores => ({
    kv: new PostgresKeyValueStore({ pool, schema, table: ANCHOR_TABLES.kv, coalesce }),
    cache: new PostgresCacheProvider({ pool, schema, table: ANCHOR_TABLES.cache, prefix: ANCHOR_CACHE_PREFIX, coalesce }),
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
  const provider = new PostgresLockProvider({ pool, schema, wakeups });
  await provider.ready();
  return provider;
}
