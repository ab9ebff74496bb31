import { StowageError } from './errors.js';
import { escapeGlob } from './glob.js';
import { jsonCodec } from './json.js';
import { Lifecycle } from './lifecycle.js';
import type { KeyValueStore } from './contracts/kv.js';
import type {
  SnapshotListItem,
  SnapshotListOptions,
  SnapshotPage,
  SnapshotPageOptions,
  SnapshotSaveOptions,
  SnapshotStore,
  VersionedSnapshot,
  WorkflowSnapshot,
} from './contracts/snapshots.js';
import {
  assertExpectedVersion,
  assertSnapshotObject,
  assertValidSnapshotId,
  compareSnapshotItems,
  isAfterCursor,
  parseListOptions,
  toSnapshotPage,
} from './snapshot-support.js';

/** The key prefix of seeds 000/002. */
export const DEFAULT_STATE_PREFIX = 'workflow:state:';

export interface StatePersistenceOptions {
  /** Close the key-value store when the persistence is closed (the adapters' factories set this). */
  ownsStore?: boolean;
}

/**
 * Turns any {@link KeyValueStore} into a snapshot store that awaitly's `durable.run` accepts
 * (seeds 000/002): each snapshot is one JSON value under `prefix + id`. Listing orders by the
 * store's own `updatedAt`, so it never depends on a client clock.
 */
export function createStatePersistence<TSnapshot extends object = WorkflowSnapshot>(
  kv: KeyValueStore,
  prefix: string = DEFAULT_STATE_PREFIX,
  options: StatePersistenceOptions = {},
): SnapshotStore<TSnapshot> {
  if (typeof prefix !== 'string') throw new StowageError('E_INVALID_OPTION', 'prefix must be a string');
  const lifecycle = new Lifecycle('state persistence');
  const keyOf = (id: string) => {
    lifecycle.assertOpen();
    assertValidSnapshotId(id);
    return prefix + id;
  };

  const listAll = async (listPrefix: string): Promise<SnapshotListItem[]> => {
    lifecycle.assertOpen();
    const entries = await kv.entries(`${escapeGlob(prefix + listPrefix)}*`);
    return entries
      .map((entry) => ({ id: entry.key.slice(prefix.length), updatedAt: entry.updatedAt.toISOString() }))
      .sort(compareSnapshotItems);
  };

  const listPage = async (pageOptions?: SnapshotPageOptions): Promise<SnapshotPage> => {
    const { prefix: listPrefix, limit, after } = parseListOptions(pageOptions);
    const items = await listAll(listPrefix);
    const start = after === null ? 0 : items.findIndex((item) => isAfterCursor(item, after));
    return toSnapshotPage(start === -1 ? [] : items.slice(start, start + limit + 1), limit);
  };

  return {
    get capabilities() {
      return kv.capabilities;
    },
    async save(id: string, snapshot: TSnapshot, saveOptions?: SnapshotSaveOptions): Promise<void> {
      const key = keyOf(id);
      assertSnapshotObject(snapshot);
      const text = jsonCodec.encode(snapshot);
      const expected = saveOptions?.expectedVersion;
      assertExpectedVersion(expected);
      if (expected === undefined) await kv.set(key, text);
      else await kv.compareAndSet(key, text, expected);
    },
    async load(id: string): Promise<TSnapshot | null> {
      const text = await kv.get(keyOf(id));
      return text === null ? null : (jsonCodec.decode(text) as TSnapshot);
    },
    async loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null> {
      const entry = await kv.getEntry(keyOf(id));
      if (entry === null) return null;
      return {
        snapshot: jsonCodec.decode(entry.value) as TSnapshot,
        version: entry.version,
        updatedAt: entry.updatedAt.toISOString(),
      };
    },
    async delete(id: string): Promise<void> {
      await kv.delete(keyOf(id));
    },
    async list(listOptions?: SnapshotListOptions): Promise<SnapshotListItem[]> {
      return (await listPage({ prefix: listOptions?.prefix, limit: listOptions?.limit })).items;
    },
    listPage,
    close: () => lifecycle.close(async () => (options.ownsStore ? kv.close() : undefined)),
  };
}
