import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import type { IdempotencyRecord, IdempotencyStore, Reservation } from '../contracts/idempotency.js';
import { StowageError } from '../errors.js';
import { assertCodec, encodeValue, jsonCodec, type Codec } from '../json.js';
import { assertOptionalDuration, assertValidDuration, assertValidKey } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import { newOwnerToken } from '../lock-support.js';
import { assertReservationToken } from '../resilience-support.js';
import {
  MEMORY_CAPABILITIES,
  isLive,
  resolveMemoryOptions,
  type IdempotencyEntry,
  type MemoryOptions,
  type MemoryStorage,
} from './storage.js';

export interface MemoryIdempotencyStoreOptions extends MemoryOptions {
  /** How results become text. Default: strict JSON. */
  codec?: Codec;
}

/**
 * Idempotency records in process memory. `reserve` lets exactly one caller run an operation;
 * a claim whose ttl ran out (a crashed worker) can be reserved again.
 */
export class MemoryIdempotencyStore implements IdempotencyStore {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #codec: Codec;
  readonly #lifecycle = new Lifecycle('MemoryIdempotencyStore');

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
    const codec = options.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
  }

  async get<T = unknown>(key: string): Promise<IdempotencyRecord<T> | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const entry = this.#live(key);
    if (entry?.status !== 'completed') return null;
    return this.#record<T>(entry);
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertOptionalDuration(ttl);
    this.#complete(key, encodeValue(this.#codec, value), ttl);
  }

  async delete(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#storage.idempotency.delete(key);
  }

  async reserve<T = unknown>(key: string, ttl: number): Promise<Reservation<T>> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertValidDuration(ttl);
    const entry = this.#live(key);
    if (entry?.status === 'completed') return { status: 'completed', ...this.#record<T>(entry) };
    if (entry?.status === 'in-flight') return { status: 'in-flight', expiresAt: entry.expiresAt };
    const token = newOwnerToken();
    const now = this.#clock.now();
    this.#storage.idempotency.set(key, { status: 'in-flight', token, expiresAt: now + ttl });
    this.#storage.noteWrite(this.#storage.idempotency, now);
    return { status: 'acquired', token };
  }

  async complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertReservationToken(token);
    assertOptionalDuration(ttl);
    const text = encodeValue(this.#codec, value);
    if (!this.#holds(key, token)) {
      throw new StowageError('E_LOCK_NOT_OWNED', `the reservation of "${key}" is no longer held by this token`);
    }
    this.#complete(key, text, ttl);
  }

  async fail(key: string, token: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertReservationToken(token);
    if (!this.#holds(key, token)) return false;
    this.#storage.idempotency.delete(key);
    return true;
  }

  close(): Promise<void> {
    return this.#lifecycle.close();
  }

  /**
   * The token still holds the claim while nobody else reserved the key since, even if its
   * ttl ran out: finishing late is fine as long as no other worker took over.
   */
  #holds(key: string, token: string): boolean {
    const entry = this.#storage.idempotency.get(key);
    return entry?.status === 'in-flight' && entry.token === token;
  }

  #live(key: string): IdempotencyEntry | null {
    const entry = this.#storage.idempotency.get(key);
    return entry && isLive(entry.expiresAt, this.#clock.now()) ? entry : null;
  }

  #complete(key: string, text: string, ttl: number | undefined): void {
    const now = this.#clock.now();
    this.#storage.idempotency.set(key, { status: 'completed', text, expiresAt: ttl === undefined ? null : now + ttl });
    this.#storage.noteWrite(this.#storage.idempotency, now);
  }

  #record<T>(entry: Extract<IdempotencyEntry, { status: 'completed' }>): IdempotencyRecord<T> {
    const record: IdempotencyRecord<T> = { value: this.#codec.decode(entry.text) as T };
    if (entry.expiresAt !== null) record.expiresAt = entry.expiresAt;
    return record;
  }
}
