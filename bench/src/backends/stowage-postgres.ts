/**
 * Opens stowage's Postgres adapter on a pool the bench owns, so that its connections are
 * observed and sized exactly like the raw baseline's.
 */
import { PostgresCacheProvider, PostgresKeyValueStore, PostgresLockProvider, postgres } from '@stowage/postgres';
import type pg from 'pg';
import type { StowageSet } from '../ops.ts';

export interface OpenedStowage {
  set: StowageSet;
  close(): Promise<void>;
}

export async function openStowagePostgres(pool: pg.Pool, schema: string): Promise<OpenedStowage> {
  const set: StowageSet = {
    kv: new PostgresKeyValueStore({ pool, schema }),
    snapshots: postgres({ pool, schema, lock: {} }),
    locks: new PostgresLockProvider({ pool, schema }),
    cache: new PostgresCacheProvider({ pool, schema, prefix: 'bench' }),
  };
  return {
    set,
    close: async () => {
      await Promise.all(Object.values(set).map((resource) => resource.close()));
    },
  };
}

/** A lock provider on its own pool; `wakeups: false` polls only (no LISTEN connection). */
export async function openPostgresLockProvider(pool: pg.Pool, schema: string, wakeups: boolean): Promise<PostgresLockProvider> {
  const provider = new PostgresLockProvider({ pool, schema, wakeups });
  await provider.ready();
  return provider;
}
