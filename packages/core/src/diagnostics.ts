import { channel, tracingChannel } from 'node:diagnostics_channel';
import type { TransitionKind } from './contracts/process.js';

/*
 * What stowage publishes for observability, on `node:diagnostics_channel`. The adapter kit is
 * the only publisher: every publishing site checks `hasSubscribers` first, so while nobody
 * subscribes no message is built and nothing is sent, and stowage depends on no telemetry
 * library. `@stowage/core/telemetry` subscribes and turns these messages into OpenTelemetry
 * spans and metrics; any other subscriber (a test, another tracer) may read them too.
 */

/** Who a store is: its name in errors, and what telemetry says about it. */
export interface StoreIdentity {
  /** The object's name in errors, e.g. "PostgresKeyValueStore". */
  readonly name: string;
  /** The database, as OpenTelemetry's `db.system.name` names it: `'postgresql'`, `'mongodb'`, `'memory'`. */
  readonly system?: string;
  /** The table or collection the store works on (schema-qualified when a schema was given). */
  readonly collection?: string;
  /** The database's name (OpenTelemetry's `db.namespace`), where the settings name it. */
  readonly namespace?: string;
  /** The server's host and port (`server.address`, `server.port`), where the settings name them; never credentials. */
  readonly server?: { readonly address: string; readonly port?: number };
}

/** The channel names, for `diagnostics_channel.subscribe` / `tracingChannel`. */
export const STOWAGE_CHANNELS = {
  /** A tracing channel (`tracing:stowage:operation:start`, `…:asyncEnd`, `…:error`, …): one trace per public store call. */
  operation: 'stowage:operation',
  /** {@link CacheLookupMessage}: a cache `get` or `getOrSet` read the store. */
  cacheLookup: 'stowage:cache.lookup',
  /** {@link LockWaitMessage}: a lock acquisition ended (granted or given up). */
  lockWait: 'stowage:lock.wait',
  /** {@link BatchMessage}: concurrent point calls went out together (the kit's coalescing). */
  batch: 'stowage:batch',
  /** {@link ProcessClaimMessage}: a worker made the first claim of an item in its state. */
  processClaim: 'stowage:process.claim',
  /** {@link ProcessTransitionMessage}: an item was created or moved to another state. */
  processTransition: 'stowage:process.transition',
} as const;

/**
 * The context of one traced store call, on the `stowage:operation` tracing channel. Node adds
 * `result` (or `error`, always a `StowageError` for failures the kit maps) when the call settles.
 */
export interface OperationMessage {
  store: StoreIdentity;
  /** `<contract>.<method>`, e.g. `kv.get`, `locks.acquire`, `process.claim`. */
  operation: string;
  /** The key (or id) of a single-key call, as the caller gave it. Subscribers must not export it unless asked. */
  key?: string;
  /** The number of entries of a batch call (`getMany`, `setMany`, `deleteMany`). */
  batchSize?: number;
  result?: unknown;
  error?: unknown;
}

export interface CacheLookupMessage {
  store: StoreIdentity;
  /** True when the cache held a live entry (a cached JSON `null` is a hit). */
  hit: boolean;
}

export interface LockWaitMessage {
  store: StoreIdentity;
  /** Milliseconds from the acquisition's start to the grant (or until it gave up). */
  waited: number;
  acquired: boolean;
  /** Times a release announced by the database (a hand-off) woke the acquisition before its next poll. */
  wakeups: number;
}

export interface BatchMessage {
  store: StoreIdentity;
  /** The operation whose calls went out together, e.g. `kv.get`. */
  operation: string;
  /** Calls sent in one statement (1: a call that had no company). */
  size: number;
}

export interface ProcessClaimMessage {
  store: StoreIdentity;
  process: string;
  state: string;
  /** Milliseconds from the item entering the state to this first claim, both on the database clock. */
  lag: number;
}

export interface ProcessTransitionMessage {
  store: StoreIdentity;
  process: string;
  /** `null` when the item was created. */
  from: string | null;
  to: string;
  kind: TransitionKind;
}

export const operationChannel = tracingChannel<unknown, OperationMessage>(STOWAGE_CHANNELS.operation);
export const cacheLookupChannel = channel(STOWAGE_CHANNELS.cacheLookup);
export const lockWaitChannel = channel(STOWAGE_CHANNELS.lockWait);
export const batchChannel = channel(STOWAGE_CHANNELS.batch);
export const processClaimChannel = channel(STOWAGE_CHANNELS.processClaim);
export const processTransitionChannel = channel(STOWAGE_CHANNELS.processTransition);
