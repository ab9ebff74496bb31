import type { Clock } from '../clock.js';
import {
  IdempotencyStoreBase,
  type IdempotencyStoreBaseOptions,
  type StoredReservation,
  type StoredResult,
} from '../adapter/idempotency.js';
import {
  MEMORY_HANDLE,
  isLive,
  resolveMemoryOptions,
  type IdempotencyEntry,
  type MemoryOptions,
  type MemoryStorage,
} from './storage.js';

export interface MemoryIdempotencyStoreOptions extends MemoryOptions, IdempotencyStoreBaseOptions {}

/**
 * Idempotency records in process memory. `reserve` lets exactly one caller run an operation;
 * a claim whose ttl ran out (a crashed worker) can be reserved again.
 */
export class MemoryIdempotencyStore extends IdempotencyStoreBase {
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    super({ name: 'MemoryIdempotencyStore', system: 'memory' }, MEMORY_HANDLE, options);
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
  }

  protected async _get(key: string): Promise<StoredResult | null> {
    const entry = this.#live(key);
    return entry?.status === 'completed' ? { text: entry.text, expiresAt: entry.expiresAt } : null;
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    this.#write(key, { status: 'completed', text, expiresAt: this.#expiry(ttl) });
  }

  protected async _delete(key: string): Promise<void> {
    this.#storage.idempotency.delete(key);
  }

  protected async _reserve(key: string, token: string, ttl: number): Promise<StoredReservation> {
    const entry = this.#live(key);
    if (entry?.status === 'completed') return { status: 'completed', text: entry.text, expiresAt: entry.expiresAt };
    if (entry?.status === 'in-flight') return { status: 'in-flight', expiresAt: entry.expiresAt };
    this.#write(key, { status: 'in-flight', token, expiresAt: this.#clock.now() + ttl });
    return { status: 'acquired' };
  }

  protected async _complete(key: string, token: string, text: string, ttl: number | undefined): Promise<boolean> {
    if (!this.#holds(key, token)) return false;
    this.#write(key, { status: 'completed', text, expiresAt: this.#expiry(ttl) });
    return true;
  }

  protected async _fail(key: string, token: string): Promise<boolean> {
    if (!this.#holds(key, token)) return false;
    this.#storage.idempotency.delete(key);
    return true;
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

  #expiry(ttl: number | undefined): number | null {
    return ttl === undefined ? null : this.#clock.now() + ttl;
  }

  #write(key: string, entry: IdempotencyEntry): void {
    this.#storage.idempotency.set(key, entry);
    this.#storage.noteWrite(this.#storage.idempotency, this.#clock.now());
  }
}
