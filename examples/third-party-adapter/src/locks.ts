import type { DatabaseSync } from 'node:sqlite';
import { LockProviderBase, type LeaseDriver } from '@stowage/core/adapter';
import { NOW_MS, connect, type SqliteStoreOptions } from './database.ts';

/**
 * Take the lock when it is free, expired, or already ours. The row is kept after release, so
 * the fence only ever grows; re-acquiring a live lease with the same owner keeps its fence and
 * says so (`renewed`: an acquisition aborted in flight must not release a lease held before).
 * The WHERE clause decides before anything is written, so a failed attempt changes nothing.
 */
const RENEWAL = `locks.owner = excluded.owner AND locks.expires_at > ${NOW_MS}`;
const ACQUIRE = `
  INSERT INTO locks (key, owner, fence, expires_at, renewed) VALUES (?, ?, 1, ${NOW_MS} + ?, 0)
  ON CONFLICT (key) DO UPDATE SET
    fence = CASE WHEN ${RENEWAL} THEN locks.fence ELSE locks.fence + 1 END,
    renewed = ${RENEWAL},
    owner = excluded.owner,
    expires_at = excluded.expires_at
  WHERE locks.owner IS NULL OR locks.expires_at <= ${NOW_MS} OR locks.owner = excluded.owner
  RETURNING fence, expires_at, renewed`;

/** The lease statements on one database: all `LockProviderBase` needs (waiting polls). */
function sqliteLeases(db: DatabaseSync): LeaseDriver {
  const held = `key = ? AND owner = ? AND expires_at > ${NOW_MS}`;
  return {
    acquire: async (key, owner, ttl) => {
      const row = db.prepare(ACQUIRE).get(key, owner, ttl) as { fence: number; expires_at: number; renewed: number } | undefined;
      return row === undefined ? null : { key, owner, fence: row.fence, expiresAt: new Date(row.expires_at), renewed: row.renewed === 1 };
    },
    extend: async (key, owner, ttl) => {
      const row = db.prepare(`UPDATE locks SET expires_at = ${NOW_MS} + ? WHERE ${held} RETURNING expires_at`).get(ttl, key, owner) as
        | { expires_at: number }
        | undefined;
      return row === undefined ? null : new Date(row.expires_at);
    },
    release: async (key, owner) => db.prepare(`UPDATE locks SET owner = NULL, expires_at = 0 WHERE ${held}`).run(key, owner).changes > 0,
    forceRelease: async (key) => void db.prepare('UPDATE locks SET owner = NULL, expires_at = 0 WHERE key = ?').run(key),
    isHeld: async (key, owner) => db.prepare(`SELECT 1 FROM locks WHERE ${held}`).get(key, owner) !== undefined,
    // Rows keep their fences, so "expired" leases stay as rows: nothing to delete.
    clearExpired: async () => 0,
  };
}

/** `LockProvider` on SQLite: everything but the lease statements comes from `LockProviderBase`. */
export class SqliteLockProvider extends LockProviderBase {
  constructor(options: SqliteStoreOptions) {
    const handle = connect(options);
    super('SqliteLockProvider', handle, sqliteLeases(handle.db));
  }
}
