import { DatabaseSync } from 'node:sqlite';
import { StowageError } from '@stowage/core';
import { localHandle, type StoreHandle } from '@stowage/core/adapter';
import { SQLITE_CAPABILITIES } from './capabilities.ts';

/** Where a store keeps its data: a file path, or a `DatabaseSync` you opened (never closed by the store). */
export type SqliteStoreOptions = string | { path: string } | { database: DatabaseSync };

/**
 * The handle every store of this adapter is built on: what the kit's `StoreBase` asks of a
 * backend (capabilities, ready, error mapping, close), plus the database the operations use.
 * The schema is created when the database is opened, so `ready()` has nothing left to do.
 */
export interface SqliteHandle extends StoreHandle {
  readonly db: DatabaseSync;
}

export function connect(options: SqliteStoreOptions): SqliteHandle {
  const handle = (db: DatabaseSync, owned: boolean): SqliteHandle => ({
    ...localHandle(SQLITE_CAPABILITIES),
    db,
    // A database the caller opened stays open: it is theirs.
    close: async () => {
      if (owned) db.close();
    },
  });
  if (typeof options === 'string') return handle(openDatabase(options), true);
  if (options !== null && typeof options === 'object') {
    if ('database' in options && options.database instanceof DatabaseSync) {
      options.database.exec(SCHEMA);
      return handle(options.database, false);
    }
    if ('path' in options && typeof options.path === 'string') return handle(openDatabase(options.path), true);
  }
  throw new StowageError('E_INVALID_OPTION', 'give a database file path, { path } or { database: DatabaseSync }');
}

/**
 * One SQLite file shared by every store of this adapter (and by every process that opens the
 * same path). WAL mode lets readers and one writer work at once; `busy_timeout` makes a
 * writer wait for another process's write instead of failing at once.
 */
export function openDatabase(path: string): DatabaseSync {
  const db = new DatabaseSync(path);
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;');
  db.exec(SCHEMA);
  return db;
}

/**
 * Time comes from the database, never from JavaScript's `Date`: every statement computes
 * "now" in SQL, in epoch milliseconds, so a mocked or skewed `Date` in the caller changes
 * nothing about expiry.
 */
export const NOW_MS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

export const SCHEMA = `
  CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER
  ) WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS kv_expires_at ON kv (expires_at) WHERE expires_at IS NOT NULL;

  -- The last version handed out, for every key: a key deleted and written again continues
  -- above its old versions, so a compare-and-set never matches a value it did not read.
  CREATE TABLE IF NOT EXISTS kv_versions (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL);
  INSERT OR IGNORE INTO kv_versions VALUES (1, 0);
  CREATE TRIGGER IF NOT EXISTS kv_version_used AFTER INSERT ON kv BEGIN
    UPDATE kv_versions SET last = NEW.version WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS kv_version_bumped AFTER UPDATE OF version ON kv BEGIN
    UPDATE kv_versions SET last = NEW.version WHERE id = 1;
  END;

  -- A lock row is never deleted: it keeps the key's highest fence after release.
  CREATE TABLE IF NOT EXISTS locks (
    key        TEXT PRIMARY KEY,
    owner      TEXT,
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    renewed    INTEGER NOT NULL DEFAULT 0
  ) WITHOUT ROWID;
`;

/** The version of a write: one more than any version ever handed out (see kv_versions). */
export const NEXT_VERSION = `(SELECT last + 1 FROM kv_versions WHERE id = 1)`;

/** A live row: no expiry, or an expiry still in the future (on the database's clock). */
export const LIVE = `(expires_at IS NULL OR expires_at > ${NOW_MS})`;
