import type pg from 'pg';

/*
 * Tables as awaitly-postgres creates them, verbatim from its documentation (the "Table Schema"
 * blocks of its key-value and snapshot stores) but for the table name, and rows as it writes
 * them. The adoption tests start from these.
 */

/** awaitly-postgres's key-value table (`createPostgresPersistence`, `PostgresKeyValueStore`). */
export function awaitlyKeyValueDdl(table = 'awaitly_workflow_state'): string {
  return `CREATE TABLE ${table} (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  expires_at TIMESTAMP
);

CREATE INDEX idx_${table}_expires_at 
ON ${table}(expires_at) 
WHERE expires_at IS NOT NULL;`;
}

/** A later awaitly-postgres's key-value table: it added `updated_at` (nullable) and an index on it. */
export function awaitlyKeyValueDdlWithUpdatedAt(table = 'awaitly_workflow_state'): string {
  return `CREATE TABLE IF NOT EXISTS ${table} (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        expires_at TIMESTAMP,
        updated_at TIMESTAMPTZ
      );
CREATE INDEX IF NOT EXISTS idx_${table}_expires_at ON ${table}(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_${table}_updated_at ON ${table}(updated_at) WHERE updated_at IS NOT NULL;`;
}

/** awaitly-postgres's snapshot table (`postgres()`). */
export function awaitlySnapshotDdl(table = 'awaitly_snapshots'): string {
  return `CREATE TABLE IF NOT EXISTS ${table} (
  id TEXT PRIMARY KEY,
  snapshot JSONB NOT NULL,
  updated_at TIMESTAMPTZ DEFAULT NOW()
);

CREATE INDEX IF NOT EXISTS ${table}_updated_at_idx
ON ${table} (updated_at DESC);`;
}

/** awaitly-postgres's `set(key, value, { ttl })`: ttl in seconds, expiry as a JS Date into a `timestamp` column. */
export async function awaitlySet(client: pg.Pool | pg.Client, table: string, key: string, value: string, ttlSeconds?: number): Promise<void> {
  const expiresAt = ttlSeconds ? new Date(Date.now() + ttlSeconds * 1000) : null;
  await client.query(
    `INSERT INTO ${table} (key, value, expires_at) VALUES ($1, $2, $3)
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at`,
    [key, value, expiresAt],
  );
}

/** awaitly-postgres's snapshot `save(id, snapshot)` of a store with `prefix`. */
export async function awaitlySave(client: pg.Pool | pg.Client, table: string, prefix: string, id: string, snapshot: object): Promise<void> {
  await client.query(
    `INSERT INTO ${table} (id, snapshot, updated_at)
     VALUES ($1, $2, NOW())
     ON CONFLICT (id) DO UPDATE SET snapshot = $2, updated_at = NOW()`,
    [prefix + id, JSON.stringify(snapshot)],
  );
}

/**
 * Every statement awaitly-postgres's snapshot store (`postgres()`) sends, as its source has them
 * (`ensureTable`, `save`, `load`, `list`, `delete`), for a store with `prefix` and the workflow `id`.
 */
export function awaitlySnapshotStatements(table: string, prefix: string, id: string, snapshot: object): { name: string; text: string; values?: unknown[] }[] {
  const bare = table.slice(table.lastIndexOf('.') + 1);
  return [
    { name: 'create table', text: `CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY, snapshot JSONB NOT NULL, updated_at TIMESTAMPTZ DEFAULT NOW())` },
    { name: 'create index', text: `CREATE INDEX IF NOT EXISTS ${bare}_updated_at_idx ON ${table} (updated_at DESC)` },
    {
      name: 'save',
      text: `INSERT INTO ${table} (id, snapshot, updated_at) VALUES ($1, $2, NOW()) ON CONFLICT (id) DO UPDATE SET snapshot = $2, updated_at = NOW()`,
      values: [prefix + id, JSON.stringify(snapshot)],
    },
    { name: 'load', text: `SELECT snapshot FROM ${table} WHERE id = $1`, values: [prefix + id] },
    { name: 'list', text: `SELECT id, updated_at FROM ${table} WHERE id LIKE $1 ORDER BY updated_at DESC LIMIT $2`, values: [`${prefix}%`, 100] },
    { name: 'delete', text: `DELETE FROM ${table} WHERE id = $1`, values: [prefix + id] },
  ];
}
