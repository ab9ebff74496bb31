/**
 * Deliberately broken in-memory stores, one flaw each, for the self-check of the versions,
 * namespaces and shutdown detectors: each shows the mistake a real adapter could make (and
 * stowage's earlier adapters made), and the detector must catch it.
 */
import {
  escapeGlob,
  StowageError,
  type JsonObject,
  type KeyValueEntry,
  type KeyValueSetOptions,
  type LockHandle,
  type SnapshotListItem,
  type SnapshotListOptions,
  type SnapshotSaveOptions,
  type VersionedSnapshot,
  type WithLockOptions,
} from '@stowage/core';
import type { MemoryCacheProvider, MemoryKeyValueStore, MemoryLockProvider, MemorySnapshotStore } from '@stowage/core/memory';
import type { VersionedKv, VersionedSnapshots } from './versions.ts';
import type { NamespacedCache, NamespacedSnapshots } from './namespaces.ts';
import type { AbortableLocks, ShutdownKv } from './shutdown.ts';

const conflict = () => new StowageError('E_VERSION_CONFLICT', 'version mismatch');

/** Versions count writes of the current incarnation: "+1 per write, back to 1 after a delete" (the ABA mistake). */
export class RestartingVersionsKv implements VersionedKv {
  readonly #entries = new Map<string, { value: string; version: number; expiresAt: number | null }>();

  #live(key: string) {
    const entry = this.#entries.get(key);
    if (entry?.expiresAt != null && entry.expiresAt <= Date.now()) this.#entries.delete(key);
    return this.#entries.get(key);
  }

  async set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    const version = (this.#live(key)?.version ?? 0) + 1;
    this.#entries.set(key, { value, version, expiresAt: options?.ttl === undefined ? null : Date.now() + options.ttl });
  }

  async get(key: string): Promise<string | null> {
    return this.#live(key)?.value ?? null;
  }

  async getEntry(key: string): Promise<KeyValueEntry | null> {
    const entry = this.#live(key);
    if (!entry) return null;
    return { key, value: entry.value, version: entry.version, updatedAt: new Date(), expiresAt: entry.expiresAt === null ? null : new Date(entry.expiresAt) };
  }

  async delete(key: string): Promise<boolean> {
    return this.#live(key) !== undefined && this.#entries.delete(key);
  }

  async compareAndSet(key: string, value: string, expectedVersion: number | null, options?: KeyValueSetOptions): Promise<number> {
    if ((this.#live(key)?.version ?? null) !== expectedVersion) throw conflict();
    await this.set(key, value, options);
    return this.#live(key)!.version;
  }

  async close(): Promise<void> {}
}

/** Snapshot versions with the same mistake. */
export class RestartingVersionsSnapshots implements VersionedSnapshots {
  readonly #snapshots = new Map<string, { snapshot: JsonObject; version: number }>();

  async save(id: string, snapshot: object, options?: SnapshotSaveOptions): Promise<void> {
    const current = this.#snapshots.get(id);
    if (options?.expectedVersion !== undefined && (current?.version ?? null) !== options.expectedVersion) throw conflict();
    this.#snapshots.set(id, { snapshot: snapshot as JsonObject, version: (current?.version ?? 0) + 1 });
  }

  async load(id: string): Promise<JsonObject | null> {
    return this.#snapshots.get(id)?.snapshot ?? null;
  }

  async loadVersioned(id: string): Promise<VersionedSnapshot<JsonObject> | null> {
    const current = this.#snapshots.get(id);
    return current ? { ...current, updatedAt: new Date().toISOString() } : null;
  }

  async delete(id: string): Promise<void> {
    this.#snapshots.delete(id);
  }

  async close(): Promise<void> {}
}

/** A cache whose prefix is glued to the key on one shared unprefixed cache: `users:` + `admin:1` is `users:admin:` + `1`. */
export class GluedPrefixCache implements NamespacedCache {
  readonly #inner: MemoryCacheProvider;
  readonly #prefix: string;

  constructor(inner: MemoryCacheProvider, prefix: string) {
    this.#inner = inner;
    this.#prefix = prefix;
  }

  set<T>(key: string, value: T, ttl?: number): Promise<void> {
    return this.#inner.set(this.#prefix + key, value, ttl);
  }

  get<T>(key: string): Promise<T | null> {
    return this.#inner.get<T>(this.#prefix + key);
  }

  has(key: string): Promise<boolean> {
    return this.#inner.has(this.#prefix + key);
  }

  async keys(): Promise<string[]> {
    return (await this.#inner.keys(`${escapeGlob(this.#prefix)}*`)).map((key) => key.slice(this.#prefix.length));
  }

  async clear(): Promise<void> {
    for (const key of await this.#inner.keys(`${escapeGlob(this.#prefix)}*`)) await this.#inner.delete(key);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** A snapshot store whose prefix is glued to the id: `t1` + `1x` is `t11` + `x`. */
export class GluedPrefixSnapshots implements NamespacedSnapshots {
  readonly #inner: MemorySnapshotStore<JsonObject>;
  readonly #prefix: string;

  constructor(inner: MemorySnapshotStore<JsonObject>, prefix: string) {
    this.#inner = inner;
    this.#prefix = prefix;
  }

  save(id: string, snapshot: JsonObject): Promise<void> {
    return this.#inner.save(this.#prefix + id, snapshot);
  }

  load(id: string): Promise<JsonObject | null> {
    return this.#inner.load(this.#prefix + id);
  }

  async list(options?: SnapshotListOptions): Promise<SnapshotListItem[]> {
    const items = await this.#inner.list({ ...options, prefix: this.#prefix + (options?.prefix ?? '') });
    return items.map((item) => ({ ...item, id: item.id.slice(this.#prefix.length) }));
  }

  delete(id: string): Promise<void> {
    return this.#inner.delete(this.#prefix + id);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** close() that resolves at once and leaves the calls it did not finish pending forever. */
export class AbandoningKv implements ShutdownKv {
  readonly #inner: MemoryKeyValueStore;
  readonly #timers = new Set<NodeJS.Timeout>();

  constructor(inner: MemoryKeyValueStore) {
    this.#inner = inner;
  }

  set(key: string, value: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        this.#inner.set(key, value).then(resolve, reject);
      }, 5);
      this.#timers.add(timer);
    });
  }

  getMany(keys: readonly string[]): Promise<(string | null)[]> {
    return this.#inner.getMany(keys);
  }

  async close(): Promise<void> {
    for (const timer of this.#timers) clearTimeout(timer);
  }
}

/** Acknowledges writes at once, writes them behind on a timer, and drops what it has not written on close(). */
export class WriteBehindKv implements ShutdownKv {
  readonly #inner: MemoryKeyValueStore;
  readonly #pending = new Map<string, string>();
  readonly #timer = setInterval(() => void this.#flush(), 50);

  constructor(inner: MemoryKeyValueStore) {
    this.#inner = inner;
  }

  async set(key: string, value: string): Promise<void> {
    this.#pending.set(key, value);
  }

  getMany(keys: readonly string[]): Promise<(string | null)[]> {
    return this.#inner.getMany(keys);
  }

  async #flush(): Promise<void> {
    const writes = [...this.#pending].map(([key, value]) => ({ key, value }));
    this.#pending.clear();
    if (writes.length > 0) await this.#inner.setMany(writes);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#pending.clear();
  }
}

/**
 * A lock provider that ignores the caller's abort signal: it waits on and takes the lease; then
 * it either reports the abort and leaves the lease held (`'throws'`) or hands the lease out as
 * if nothing had happened (`'grants'`).
 */
export class AbortIgnoringLocks implements AbortableLocks {
  readonly #inner: MemoryLockProvider;
  readonly #after: 'throws' | 'grants';

  constructor(inner: MemoryLockProvider, after: 'throws' | 'grants') {
    this.#inner = inner;
    this.#after = after;
  }

  async acquire(key: string, ttl: number, options: { wait: number; signal?: AbortSignal; pollInterval?: number }): Promise<LockHandle | null> {
    const handle = await this.#inner.acquire(key, ttl, { wait: options.wait, pollInterval: options.pollInterval ?? 10 });
    if (this.#after === 'throws') options.signal?.throwIfAborted(); // the lease stays behind
    return handle;
  }

  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T> {
    return this.#inner.withLock(key, fn, { ttl: options.ttl, wait: options.wait ?? 0, pollInterval: options.pollInterval ?? 10 });
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
