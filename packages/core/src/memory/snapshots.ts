import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import {
  DEFAULT_WORKFLOW_LOCK_TTL,
  type LockingSnapshotStore,
  type SnapshotListItem,
  type SnapshotListOptions,
  type SnapshotPage,
  type SnapshotPageOptions,
  type SnapshotSaveOptions,
  type SnapshotStore,
  type VersionedSnapshot,
  type WorkflowSnapshot,
} from '../contracts/snapshots.js';
import { StowageError } from '../errors.js';
import { jsonCodec } from '../json.js';
import { assertValidDuration, describeType } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import { assertValidOwner, newOwnerToken } from '../lock-support.js';
import {
  assertExpectedVersion,
  assertSnapshotObject,
  assertValidSnapshotId,
  compareSnapshotItems,
  isAfterCursor,
  parseListOptions,
  toSnapshotPage,
} from '../snapshot-support.js';
import { MEMORY_CAPABILITIES, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export interface MemorySnapshotStoreOptions extends MemoryOptions {
  /** Stored ids are `prefix + id`; stores with different prefixes on one storage do not see each other. Default `''`. */
  prefix?: string;
}

export interface MemoryWorkflowLockOptions {
  /** Lease for `tryAcquire` without `ttlMs`. Default 30 s. */
  ttl?: number;
}

export interface MemoryLockingSnapshotStoreOptions extends MemorySnapshotStoreOptions {
  /** Makes the store an awaitly `WorkflowLock` too (one runner per workflow id). */
  lock: true | MemoryWorkflowLockOptions;
}

/** Workflow snapshots in process memory: a drop-in `store` for awaitly's `durable.run`. */
export class MemorySnapshotStore<TSnapshot extends object = WorkflowSnapshot> implements SnapshotStore<TSnapshot> {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  protected readonly storage: MemoryStorage;
  protected readonly clock: Clock;
  protected readonly lifecycle = new Lifecycle('MemorySnapshotStore');
  readonly #prefix: string;

  constructor(options: MemorySnapshotStoreOptions = {}) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.storage = storage;
    this.clock = clock;
    const prefix = options.prefix === undefined ? '' : options.prefix;
    if (typeof prefix !== 'string') {
      throw new StowageError('E_INVALID_OPTION', `prefix must be a string, got ${describeType(prefix)}`);
    }
    this.#prefix = prefix;
  }

  async save(id: string, snapshot: TSnapshot, options?: SnapshotSaveOptions): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    assertSnapshotObject(snapshot);
    const text = jsonCodec.encode(snapshot);
    const expected = options?.expectedVersion;
    assertExpectedVersion(expected);
    const key = this.#prefix + id;
    const current = this.storage.snapshots.get(key);
    if (expected !== undefined && (current?.version ?? null) !== expected) {
      throw new StowageError(
        'E_VERSION_CONFLICT',
        `snapshot "${id}" is at version ${current?.version ?? 'absent'}, expected ${expected ?? 'absent'}`,
      );
    }
    this.storage.snapshots.set(key, { text, version: (current?.version ?? 0) + 1, updatedAt: this.clock.now() });
  }

  async load(id: string): Promise<TSnapshot | null> {
    return (await this.loadVersioned(id))?.snapshot ?? null;
  }

  async loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    const record = this.storage.snapshots.get(this.#prefix + id);
    if (!record) return null;
    return {
      snapshot: jsonCodec.decode(record.text) as TSnapshot,
      version: record.version,
      updatedAt: new Date(record.updatedAt).toISOString(),
    };
  }

  async delete(id: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    this.storage.snapshots.delete(this.#prefix + id);
  }

  async list(options?: SnapshotListOptions): Promise<SnapshotListItem[]> {
    return (await this.listPage({ prefix: options?.prefix, limit: options?.limit })).items;
  }

  async listPage(options?: SnapshotPageOptions): Promise<SnapshotPage> {
    this.lifecycle.assertOpen();
    const { prefix, limit, after } = parseListOptions(options);
    const start = this.#prefix + prefix;
    const items: SnapshotListItem[] = [];
    for (const [key, record] of this.storage.snapshots) {
      if (!key.startsWith(start)) continue;
      const item = { id: key.slice(this.#prefix.length), updatedAt: new Date(record.updatedAt).toISOString() };
      if (after === null || isAfterCursor(item, after)) items.push(item);
    }
    items.sort(compareSnapshotItems);
    return toSnapshotPage(items.slice(0, limit + 1), limit);
  }

  close(): Promise<void> {
    return this.lifecycle.close();
  }

  protected get prefix(): string {
    return this.#prefix;
  }
}

/** A {@link MemorySnapshotStore} that is also awaitly's `WorkflowLock`. */
export class MemoryLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends MemorySnapshotStore<TSnapshot>
  implements LockingSnapshotStore<TSnapshot>
{
  readonly #defaultTtl: number;

  constructor(options: MemoryLockingSnapshotStoreOptions) {
    super(options);
    const lock = options.lock === true ? {} : options.lock;
    if (lock === null || typeof lock !== 'object') {
      throw new StowageError('E_INVALID_OPTION', 'lock must be true or an object');
    }
    this.#defaultTtl = lock.ttl ?? DEFAULT_WORKFLOW_LOCK_TTL;
    assertValidDuration(this.#defaultTtl, 'lock.ttl');
  }

  async tryAcquire(id: string, options?: { ttlMs?: number }): Promise<{ ownerToken: string } | null> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    const ttl = this.#ttl(options);
    const lease = this.storage.workflowLocks.acquire(this.prefix + id, newOwnerToken(), ttl, this.clock.now());
    return lease === null ? null : { ownerToken: lease.owner };
  }

  async release(id: string, ownerToken: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    assertValidOwner(ownerToken);
    this.storage.workflowLocks.release(this.prefix + id, ownerToken, this.clock.now());
  }

  async renew(id: string, ownerToken: string, options?: { ttlMs?: number }): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    assertValidOwner(ownerToken);
    const ttl = this.#ttl(options);
    return this.storage.workflowLocks.extend(this.prefix + id, ownerToken, ttl, this.clock.now()) !== null;
  }

  #ttl(options: { ttlMs?: number } | undefined): number {
    const ttl = options?.ttlMs ?? this.#defaultTtl;
    assertValidDuration(ttl, 'ttlMs');
    return ttl;
  }
}

/**
 * Seed 003's one-liner, in memory: `memory()` is a snapshot store; `memory({ lock: true })`
 * is also a `WorkflowLock`, so `durable.run` runs each workflow id once at a time.
 */
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options: MemoryLockingSnapshotStoreOptions,
): MemoryLockingSnapshotStore<TSnapshot>;
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options?: MemorySnapshotStoreOptions,
): MemorySnapshotStore<TSnapshot>;
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options: MemorySnapshotStoreOptions & { lock?: true | MemoryWorkflowLockOptions | false } = {},
): MemorySnapshotStore<TSnapshot> {
  const { lock, ...rest } = options;
  return lock ? new MemoryLockingSnapshotStore<TSnapshot>({ ...rest, lock }) : new MemorySnapshotStore<TSnapshot>(rest);
}
