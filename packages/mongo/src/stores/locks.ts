import { LockProviderBase } from '@stowage/core/adapter';
import { mongoStore, storeDatabase } from '../database.js';
import type { LockDocument } from '../documents.js';
import type { MongoStoreOptions } from '../options.js';
import { MongoLeases } from './leases.js';

/** `writeConcern` (every store has it) defaults to `{ w: 'majority' }`: a granted lease survives a failover. */
export type MongoLockProviderOptions = MongoStoreOptions;

/**
 * {@link LockProvider} on MongoDB (collection `stowage_locks`): leases with owner tokens and
 * fencing tokens that never go back, on the server's clock, with majority writes; waiting
 * acquisitions woken by change streams on replica sets and sharded clusters (polling
 * elsewhere). Handles, waiting and `withLock` are the kit's.
 */
export class MongoLockProvider extends mongoStore(LockProviderBase) {
  constructor(options: MongoLockProviderOptions) {
    const db = storeDatabase<LockDocument>(options, { kind: 'locks', name: 'MongoLockProvider', wakeups: true });
    super(db.identity, db, new MongoLeases(db, 'locks'));
  }
}
