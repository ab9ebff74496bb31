import { randomBytes } from 'node:crypto';
import pg from 'pg';

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

/**
 * The tables go-go-scope 2.9's own PostgreSQL adapters create, as their `connect()` runs it
 * (`PostgresAdapter`: locks, circuit, cache; `PostgresIdempotencyAdapter`: idempotency). Its
 * `PostgresAdapter` writes `go_goscope_checkpoints` (`ON CONFLICT (id)`) without creating it:
 * here it has the layout of go-go-scope's MySQL and SQLite adapters, in PostgreSQL types.
 */
export function goGoScopePostgresDdl(): string {
  return `CREATE TABLE IF NOT EXISTS go_goscope_locks (
  key TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  expires_at TIMESTAMP NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_locks_expires ON go_goscope_locks(expires_at);
CREATE TABLE IF NOT EXISTS go_goscope_circuit (
  key TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  failure_count INTEGER NOT NULL DEFAULT 0,
  last_failure_time TIMESTAMP,
  last_success_time TIMESTAMP,
  updated_at TIMESTAMP NOT NULL DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS idx_circuit_updated ON go_goscope_circuit(updated_at);
CREATE TABLE IF NOT EXISTS go_goscope_cache (
  key TEXT PRIMARY KEY,
  value JSONB NOT NULL,
  expires_at TIMESTAMP,
  accessed_at TIMESTAMP DEFAULT NOW()
);
CREATE INDEX IF NOT EXISTS idx_cache_expires ON go_goscope_cache(expires_at);
CREATE TABLE IF NOT EXISTS go_goscope_idempotency (
  key VARCHAR(255) PRIMARY KEY,
  value JSONB NOT NULL,
  expires_at TIMESTAMP WITH TIME ZONE,
  created_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
  updated_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX IF NOT EXISTS idx_idempotency_expires ON go_goscope_idempotency(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS go_goscope_checkpoints (
  id TEXT PRIMARY KEY,
  task_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  timestamp BIGINT NOT NULL,
  progress INTEGER NOT NULL DEFAULT 0,
  data JSONB NOT NULL,
  estimated_time_remaining BIGINT,
  created_at TIMESTAMPTZ DEFAULT NOW()
)`;
}

/** One write of each of go-go-scope's own PostgreSQL adapters, with its statements (`keyPrefix` as given to them). */
export async function goGoScopePostgresWrites(client: pg.Pool, schema: string, keyPrefix: string): Promise<void> {
  const t = (name: string) => `${schema}.${name}`;
  await client.query(`INSERT INTO ${t('go_goscope_locks')} (key, owner, expires_at) VALUES ($1, $2, $3)`, [`${keyPrefix}lock:resource:123`, 'worker-1', new Date(Date.now() + 60_000)]);
  await client.query(
    `INSERT INTO ${t('go_goscope_circuit')} (key, state, failure_count, last_failure_time, last_success_time, updated_at) VALUES ($1, $2, $3, $4, $5, NOW())
     ON CONFLICT (key) DO UPDATE SET state = EXCLUDED.state, failure_count = EXCLUDED.failure_count, last_failure_time = EXCLUDED.last_failure_time,
       last_success_time = EXCLUDED.last_success_time, updated_at = EXCLUDED.updated_at`,
    [`${keyPrefix}circuit:payments-api`, 'open', 5, new Date().toISOString(), null],
  );
  await client.query(
    `INSERT INTO ${t('go_goscope_cache')} (key, value, expires_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at`,
    [`${keyPrefix}cache:user:1`, JSON.stringify({ name: 'Ada' }), null],
  );
  // PostgresIdempotencyAdapter with its default (no) keyPrefix: a task's recorded result tuple.
  await client.query(
    `INSERT INTO ${t('go_goscope_idempotency')} (key, value, expires_at, updated_at) VALUES ($1, $2, $3, CURRENT_TIMESTAMP)
     ON CONFLICT (key) DO UPDATE SET value = $2, expires_at = $3, updated_at = CURRENT_TIMESTAMP`,
    ['charge:order-1', JSON.stringify([undefined, { chargeId: 'ch_1' }]), new Date(Date.now() + 3_600_000).toISOString()],
  );
  await client.query(
    `INSERT INTO ${t('go_goscope_checkpoints')} (id, task_id, sequence, timestamp, progress, data, estimated_time_remaining) VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (id) DO UPDATE SET progress = EXCLUDED.progress, data = EXCLUDED.data, estimated_time_remaining = EXCLUDED.estimated_time_remaining`,
    ['cp-1', 'import-42', 1, Date.now(), 10, JSON.stringify({ offset: 1000 }), null],
  );
}

/*
 * go-go-scope 2.9's `PostgresAdapter` writing, statement for statement (`keyPrefix` as given to
 * it; `table` qualified): `acquire` on a free key (its INSERT, the expiry a client-side Date),
 * `setState`, cache `set`, checkpoint `save`.
 */

export async function goGoScopeAcquire(client: pg.Pool, table: string, keyPrefix: string, key: string, ttl: number, owner: string): Promise<void> {
  await client.query(`INSERT INTO ${table} (key, owner, expires_at) VALUES ($1, $2, $3)`, [`${keyPrefix}lock:${key}`, owner, new Date(Date.now() + ttl)]);
}

export async function goGoScopeSetState(
  client: pg.Pool,
  table: string,
  keyPrefix: string,
  key: string,
  state: { state: string; failureCount: number; lastFailureTime?: number; lastSuccessTime?: number },
): Promise<void> {
  await client.query(
    `
        INSERT INTO ${table} 
          (key, state, failure_count, last_failure_time, last_success_time, updated_at)
        VALUES ($1, $2, $3, $4, $5, NOW())
        ON CONFLICT (key) DO UPDATE SET
          state = EXCLUDED.state,
          failure_count = EXCLUDED.failure_count,
          last_failure_time = EXCLUDED.last_failure_time,
          last_success_time = EXCLUDED.last_success_time,
          updated_at = EXCLUDED.updated_at
      `,
    [
      `${keyPrefix}circuit:${key}`,
      state.state,
      state.failureCount,
      state.lastFailureTime ? new Date(state.lastFailureTime).toISOString() : null,
      state.lastSuccessTime ? new Date(state.lastSuccessTime).toISOString() : null,
    ],
  );
}

export async function goGoScopeCacheSet(client: pg.Pool, table: string, keyPrefix: string, key: string, value: unknown, ttl?: number): Promise<void> {
  const expiresAt = ttl ? new Date(Date.now() + ttl).toISOString() : null;
  await client.query(
    `INSERT INTO ${table} (key, value, expires_at) VALUES ($1, $2, $3)
			 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at`,
    [`${keyPrefix}cache:${key}`, JSON.stringify(value), expiresAt],
  );
}

export async function goGoScopeSaveCheckpoint(
  client: pg.Pool,
  table: string,
  checkpoint: { id: string; taskId: string; sequence: number; timestamp: number; progress: number; data: unknown; estimatedTimeRemaining?: number },
): Promise<void> {
  await client.query(
    `
			INSERT INTO ${table} 
				(id, task_id, sequence, timestamp, progress, data, estimated_time_remaining)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (id) DO UPDATE SET
				progress = EXCLUDED.progress,
				data = EXCLUDED.data,
				estimated_time_remaining = EXCLUDED.estimated_time_remaining
		`,
    [
      checkpoint.id,
      checkpoint.taskId,
      checkpoint.sequence,
      checkpoint.timestamp,
      checkpoint.progress,
      JSON.stringify(checkpoint.data),
      checkpoint.estimatedTimeRemaining ?? null,
    ],
  );
}

/** A schema of one adoption test, seeded with the tables it starts from (see {@link seededSchema}). */
export interface SeededSchema {
  schema: string;
  /** A pool of one connection, for the seed rows and the checks. */
  admin: pg.Pool;
  /** `table` qualified with the schema. */
  q(table: string): string;
  /** Drops the schema and ends the admin pool. */
  drop(): Promise<void>;
}

/**
 * A schema of its own (`prefix` and a random suffix) with `sql`, the seed DDL (unqualified), run
 * in it. PGlite's connections share one session, so search_path is set for the DDL only: the
 * tests name the schema.
 */
export async function seededSchema(url: string, prefix: string, sql: string): Promise<SeededSchema> {
  const schema = `${prefix}_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${sql}; SET search_path TO DEFAULT`);
  return {
    schema,
    admin,
    q: (table) => `${schema}.${table}`,
    async drop() {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    },
  };
}
