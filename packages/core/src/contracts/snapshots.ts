import type { JsonValue } from '../json.js';
import type { DatabaseTransaction, ScanOptions, StowageResource } from './common.js';

/**
 * The workflow snapshot shape of `awaitly` (`WorkflowSnapshot` from `awaitly/persistence`),
 * restated structurally so that stowage stores are a drop-in `store` for `durable.run`
 * without depending on awaitly. Stores accept any JSON object; this is only the default type.
 */
export interface WorkflowSnapshot {
  formatVersion: 1;
  workflowName?: string;
  steps: Record<string, WorkflowStepResult>;
  execution: {
    status: 'running' | 'completed' | 'failed';
    lastUpdated: string;
    completedAt?: string;
    currentStepId?: string;
  };
  metadata?: {
    workflowId?: string;
    definitionHash?: string;
    input?: JsonValue;
    [key: string]: JsonValue | undefined;
  };
  warnings?: Array<{
    type: 'lossy_value';
    stepId: string;
    path: string;
    reason: 'non-json' | 'circular' | 'encode-failed';
  }>;
}

export type WorkflowStepResult =
  | { ok: true; value: JsonValue }
  | { ok: false; error: JsonValue; cause: SerializedCause; meta?: { origin: 'result' | 'throw' } };

export type SerializedCause =
  | { type: 'error'; name: string; message: string; stack?: string; cause?: SerializedCause }
  | { type: 'thrown'; originalType?: string; value?: JsonValue; stringRepresentation: string; truncated?: true };

/**
 * awaitly's runtime `ResumeState` (what `createResumeStateCollector().getResumeState()`
 * returns and `workflow.run(fn, { resumeState })` takes), restated structurally. A snapshot
 * store accepts one in `save` and hands it back from `load` and `loadResumeState`; it is
 * stored in awaitly's JSON form (`{ kind: "ResumeState", steps: [...] }`).
 */
export interface ResumeState {
  steps: Map<string, ResumeStateEntry>;
}

export interface ResumeStateEntry {
  result: { ok: true; value: unknown } | { ok: false; error: unknown; cause?: unknown };
  /** How a failed step failed (awaitly's `StepFailureMeta`). */
  meta?:
    | { origin: 'result'; resultCause?: unknown }
    | { origin: 'throw'; thrown: unknown }
    | { origin: 'fallback'; fallbackUsed: true; fallbackReason: string };
}

export interface SnapshotListItem {
  id: string;
  /** ISO 8601 time of the last save, on the store's clock. */
  updatedAt: string;
}

export interface SnapshotListOptions {
  /** Only ids that start with this literal text (no wildcards). */
  prefix?: string;
  /** At most this many items (default 100, at most 10,000). */
  limit?: number;
}

export interface SnapshotPageOptions extends SnapshotListOptions {
  /** The `nextCursor` of the previous page. */
  cursor?: string;
}

export interface SnapshotPage {
  items: SnapshotListItem[];
  /** Pass as `cursor` to get the next page; `null` when this was the last one. */
  nextCursor: string | null;
}

export interface SnapshotSaveOptions {
  /**
   * Save only if the stored version is this (`null`: only if no snapshot exists). Otherwise
   * rejects with `E_VERSION_CONFLICT` and keeps what is stored.
   */
  expectedVersion?: number | null;
}

export interface VersionedSnapshot<TSnapshot> {
  snapshot: TSnapshot;
  /** Grows on every save and is never reused for the id, also after delete (see `KeyValueEntry.version`). */
  version: number;
  updatedAt: string;
}

/**
 * Workflow snapshots by id (awaitly's `SnapshotStore`). A drop-in `store` for awaitly's `durable.run`.
 * Any JSON object round-trips exactly.
 */
export interface SnapshotStore<TSnapshot extends object = WorkflowSnapshot> extends StowageResource {
  /**
   * Insert or replace. With `expectedVersion`, only while the stored version is that one
   * (`null`: none stored). An awaitly `ResumeState` is accepted too (stored in awaitly's JSON form).
   */
  save(id: string, snapshot: TSnapshot | ResumeState, options?: SnapshotSaveOptions): Promise<void>;
  /** The snapshot, or `null`. What was saved as a `ResumeState` comes back as one. */
  load(id: string): Promise<TSnapshot | null>;
  /** What was saved as a `ResumeState`, ready for `workflow.run(fn, { resumeState })`; `undefined` for none (or a snapshot). */
  loadResumeState(id: string): Promise<ResumeState | undefined>;
  loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null>;
  /** Removes the snapshot if there is one. */
  delete(id: string): Promise<void>;
  /** Newest first. */
  list(options?: SnapshotListOptions): Promise<SnapshotListItem[]>;
  /** Newest first, in pages that stay stable while snapshots are being saved. */
  listPage(options?: SnapshotPageOptions): Promise<SnapshotPage>;
  /** Every snapshot (or those whose id starts with `prefix`), newest first, streamed page by page. */
  scan(options?: { prefix?: string } & ScanOptions): AsyncIterable<SnapshotListItem>;
  /** This store inside a transaction the caller holds (see `KeyValueStore.withTransaction`); optional. */
  withTransaction?(transaction: DatabaseTransaction): this;
}

/** awaitly's `WorkflowLock`: one process runs a workflow id at a time. */
export interface WorkflowLock {
  /** `null` when another owner holds a live lease. `ttlMs` defaults to the store's `lock.ttl`. */
  tryAcquire(id: string, options?: { ttlMs?: number }): Promise<{ ownerToken: string } | null>;
  /** Releases only if `ownerToken` still owns the lease; otherwise does nothing. */
  release(id: string, ownerToken: string): Promise<void>;
  /** False when the lease was lost (expired and taken, or released). */
  renew(id: string, ownerToken: string, options?: { ttlMs?: number }): Promise<boolean>;
}

export type LockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot> = SnapshotStore<TSnapshot> & WorkflowLock;

/** Default lease for `WorkflowLock.tryAcquire` without `ttlMs`. */
export const DEFAULT_WORKFLOW_LOCK_TTL = 30_000;
export const DEFAULT_LIST_LIMIT = 100;
export const MAX_LIST_LIMIT = 10_000;
