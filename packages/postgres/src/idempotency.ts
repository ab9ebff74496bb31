import {
  StowageError,
  assertCodec,
  assertOptionalDuration,
  assertReservationToken,
  assertValidDuration,
  encodeValue,
  jsonCodec,
  newOwnerToken,
  type Codec,
  type IdempotencyRecord,
  type IdempotencyStore,
  type Reservation,
} from '@stowage/core';
import { storedKey } from './key-encoding.js';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import {
  LIVE,
  PostgresStoreBase,
  epochMs,
  msInterval,
  storeSetup,
  type PostgresStoreOptions,
} from './store.js';

export interface PostgresIdempotencyStoreOptions extends PostgresStoreOptions {
  /** How results become text (default strict JSON). */
  codec?: Codec;
}

/**
 * {@link IdempotencyStore} on one table (default `stowage_idempotency`). A row is either an
 * in-flight claim (`status = 'in-flight'`, with the claimant's token and a server-clock
 * expiry) or a completed result. `reserve` is one upsert that always returns the row as it
 * stands after the statement, so exactly one concurrent caller finds its own token in it.
 */
export class PostgresIdempotencyStore extends PostgresStoreBase implements IdempotencyStore {
  readonly #table: string;
  readonly #codec: Codec;

  constructor(options: PostgresIdempotencyStoreOptions | string) {
    const setup = storeSetup('idempotency', options, DEFAULT_TABLE_NAMES.idempotency);
    super('PostgresIdempotencyStore', setup);
    this.#table = setup.tables[0]![1].sql;
    const parsed = typeof options === 'string' ? {} : options;
    const codec = parsed.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
    this.startCleanup(parsed.cleanupInterval, () => this.clearExpired());
  }

  async get<T = unknown>(key: string): Promise<IdempotencyRecord<T> | null> {
    this.assertOpen();
    key = storedKey(key);
    const { rows } = await this.run(
      `SELECT value, ${epochMs('expires_at')} AS expires_at FROM ${this.#table}
       WHERE key = $1 AND status = 'completed' AND ${LIVE}`,
      [key],
    );
    if (rows.length === 0) return null;
    return this.#record<T>(rows[0].value, rows[0].expires_at);
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    assertOptionalDuration(ttl, 'ttl');
    const text = this.#encode(value);
    await this.run(
      `INSERT INTO ${this.#table} (key, status, token, value, updated_at, expires_at)
       VALUES ($1, 'completed', NULL, $2, now(), now() + ${msInterval('$3')})
       ON CONFLICT (key) DO UPDATE SET status = 'completed', token = NULL, value = EXCLUDED.value,
         updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`,
      [key, text, ttl ?? null],
    );
  }

  async delete(key: string): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    await this.run(`DELETE FROM ${this.#table} WHERE key = $1`, [key]);
  }

  /**
   * One statement: inserts a claim, or replaces an expired row with one; otherwise leaves the
   * row as it is (an update to itself, which takes the row lock and so returns the latest
   * committed version even under contention).
   */
  async reserve<T = unknown>(key: string, ttl: number): Promise<Reservation<T>> {
    this.assertOpen();
    key = storedKey(key);
    assertValidDuration(ttl, 'ttl');
    const token = newOwnerToken();
    const expired = `i.expires_at <= now()`;
    const { rows } = await this.run(
      `INSERT INTO ${this.#table} AS i (key, status, token, value, updated_at, expires_at)
       VALUES ($1, 'in-flight', $2, NULL, now(), now() + ${msInterval('$3')})
       ON CONFLICT (key) DO UPDATE SET
         status = CASE WHEN ${expired} THEN EXCLUDED.status ELSE i.status END,
         token = CASE WHEN ${expired} THEN EXCLUDED.token ELSE i.token END,
         value = CASE WHEN ${expired} THEN NULL ELSE i.value END,
         updated_at = CASE WHEN ${expired} THEN EXCLUDED.updated_at ELSE i.updated_at END,
         expires_at = CASE WHEN ${expired} THEN EXCLUDED.expires_at ELSE i.expires_at END
       RETURNING status, token IS NOT DISTINCT FROM $2 AS acquired, value, ${epochMs('expires_at')} AS expires_at`,
      [key, token, ttl],
    );
    const row = rows[0];
    if (row.acquired === true) return { status: 'acquired', token };
    if (row.status === 'in-flight') return { status: 'in-flight', expiresAt: Math.floor(row.expires_at) };
    return { status: 'completed', ...this.#record<T>(row.value, row.expires_at) };
  }

  async complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    assertReservationToken(token);
    assertOptionalDuration(ttl, 'ttl');
    const text = this.#encode(value);
    const { rowCount } = await this.run(
      `UPDATE ${this.#table} SET status = 'completed', token = NULL, value = $3, updated_at = now(),
         expires_at = now() + ${msInterval('$4')}
       WHERE key = $1 AND token = $2 AND status = 'in-flight'`,
      [key, token, text, ttl ?? null],
    );
    if (rowCount === 0) {
      throw new StowageError('E_LOCK_NOT_OWNED', `the claim on "${key}" is no longer held by this token`);
    }
  }

  async fail(key: string, token: string): Promise<boolean> {
    this.assertOpen();
    key = storedKey(key);
    assertReservationToken(token);
    const { rowCount } = await this.run(
      `DELETE FROM ${this.#table} WHERE key = $1 AND token = $2 AND status = 'in-flight'`,
      [key, token],
    );
    return (rowCount ?? 0) > 0;
  }

  /** Deletes expired results and abandoned claims; returns how many. */
  async clearExpired(): Promise<number> {
    this.assertOpen();
    const { rowCount } = await this.run(`DELETE FROM ${this.#table} WHERE expires_at <= now()`);
    return rowCount ?? 0;
  }

  #record<T>(text: string, expiresAt: number | null): IdempotencyRecord<T> {
    const record: IdempotencyRecord<T> = { value: this.#codec.decode(text) as T };
    if (expiresAt !== null) record.expiresAt = Math.floor(expiresAt);
    return record;
  }

  #encode(value: unknown): string {
    const text = encodeValue(this.#codec, value);
    if (text.includes('\u0000')) {
      throw new StowageError('E_INVALID_VALUE', 'the encoded value contains U+0000, which PostgreSQL text cannot store');
    }
    return text;
  }
}
