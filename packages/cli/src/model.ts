import { StowageError } from '@stowage/core';

/**
 * What every backend answers, whatever the database: the rows of each view, one page at a
 * time, and the findings of `doctor`. The CLI, `--json` and the web page print these shapes.
 */

export type Section = 'workflows' | 'locks' | 'breakers' | 'idempotency' | 'processes' | 'caches';
export const SECTIONS: readonly Section[] = ['workflows', 'locks', 'breakers', 'idempotency', 'processes', 'caches'];

/** One awaitly workflow snapshot (a row of the snapshot table or collection). */
export interface WorkflowRow {
  /** The store's `prefix` (its namespace; `''` for none). */
  namespace: string;
  id: string;
  /** `execution.status` of the snapshot: running, completed, failed (or `unknown`). */
  status: string;
  /** `execution.currentStepId`, else the last key of `steps`. */
  lastStep: string | null;
  steps: number;
  updatedAt: string;
  /** The holder of the workflow's lease (a store created with `lock`), while it is live. */
  leaseOwner: string | null;
  leaseExpiresInMs: number | null;
}

export interface LockRow {
  key: string;
  owner: string;
  fence: string;
  /** Negative once the lease ran out (an expired lease is free to take; it stays until swept or re-acquired). */
  expiresInMs: number;
  /** `locks` (LockProvider) or `workflowLocks` (awaitly's WorkflowLock of a snapshot store). */
  table: string;
}

export interface BreakerRow {
  key: string;
  state: string;
  failures: number;
  lastFailure: string | null;
  openUntil: string | null;
}

export interface IdempotencyRow {
  key: string;
  status: string;
  ageMs: number | null;
  expiresInMs: number | null;
}

/** The items of one state of one process (state machines), counted. */
export interface ProcessRow {
  process: string;
  state: string;
  items: number;
  /** Items whose lease (a worker handling them) is live. */
  leased: number;
  /** The longest an item of this state has been there: its entry time (ISO). */
  oldest: string | null;
}

/** The entries of one cache prefix, counted. */
export interface CacheRow {
  prefix: string;
  entries: number;
  /** Expired, invisible to the cache, not swept yet. */
  expired: number;
}

export interface RowOf {
  processes: ProcessRow;
  caches: CacheRow;
  workflows: WorkflowRow;
  locks: LockRow;
  breakers: BreakerRow;
  idempotency: IdempotencyRow;
}

export interface InspectQuery {
  /** Keys (workflow ids) that start with this text, literally. */
  prefix?: string;
  /** Workflows of this store prefix only. */
  namespace?: string;
  /** Workflow status, breaker state or idempotency status. */
  status?: string;
  /** Not written (workflows, breakers, idempotency) or acquired (locks) for this many ms. */
  olderThanMs?: number;
  limit: number;
  /** From a previous page's `nextCursor`. */
  cursor?: string;
  /**
   * Workflows kept by createPostgresPersistence / createMongoPersistence (awaitly's key-value
   * layout: one JSON value under `prefix + id` in the key-value table) instead of a snapshot store.
   */
  kv?: boolean;
}

/** The key prefix of awaitly's key-value persistence (and of createStatePersistence). */
export const DEFAULT_STATE_PREFIX = 'workflow:state:';

/** A row of a snapshot kept as JSON text: its `WorkflowRow`, or `undefined` when `status` filters it out. */
export function workflowRow(namespace: string, id: string, json: string, updatedAt: Date | null, status: string | undefined): WorkflowRow | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    parsed = null;
  }
  const described = describeSnapshot(parsed);
  if (status !== undefined && described.status !== status) return undefined;
  return { namespace, id, ...described, updatedAt: (updatedAt ?? new Date(0)).toISOString(), leaseOwner: null, leaseExpiresInMs: null };
}

export interface Page<T> {
  items: T[];
  /** Pass as `--after` for the next page; `null` on the last one. */
  nextCursor: string | null;
  /** Why the view is empty without being an error (its table does not exist). */
  note?: string;
}

export type Severity = 'ok' | 'info' | 'warn' | 'error';

/** One line of `doctor`: `error` means a promise of stowage would break as deployed. */
export interface Finding {
  severity: Severity;
  check: string;
  message: string;
}

/** One table or collection that adoption would change, and how. */
export interface AdoptionPlanItem {
  /** The table or collection. */
  name: string;
  /** What it is: awaitly-postgres's key-value table, go-go-scope's locks, … */
  layout: string;
  /** About how many rows or documents it holds (catalog estimate). */
  rows: number;
  /** The changes, in the order adoption makes them. */
  changes: string[];
  /** Set when stowage refuses this layout: adoption would fail, nothing changes. */
  refused?: string;
}

export interface Backend {
  readonly kind: 'postgres' | 'mongo';
  inspect<S extends Section>(section: S, query: InspectQuery): Promise<Page<RowOf[S]>>;
  /** One workflow's snapshot, whole (for `inspect workflow <id>`). */
  workflow(namespace: string, id: string): Promise<unknown>;
  doctor(options: DoctorOptions): Promise<Finding[]>;
  adoptionPlan(): Promise<AdoptionPlanItem[]>;
  /** Runs the automatic adoption of the adapter package on the tables of the plan. */
  adopt(plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void>;
  close(): Promise<void>;
}

export interface DoctorOptions {
  /** Where the LISTEN connection goes, when it is not the URL itself (the stores' `listenUrl`). */
  listenUrl?: string;
}

/** Cursors are opaque to the user: base64url of the last row's key. */
export function encodeCursor(key: unknown[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

export function decodeCursor(cursor: string | undefined): unknown[] | undefined {
  if (cursor === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString());
  } catch {
    parsed = undefined;
  }
  if (!Array.isArray(parsed) || !parsed.every((part) => typeof part === 'string')) {
    throw new StowageError('E_INVALID_OPTION', `--after takes the cursor a page printed (its "more: --after …" line or nextCursor), got ${JSON.stringify(cursor)}`);
  }
  return parsed;
}

/** Status, current step and step count of a snapshot document (awaitly's `WorkflowSnapshot`), tolerant of any JSON. */
export function describeSnapshot(snapshot: unknown): { status: string; lastStep: string | null; steps: number } {
  const doc = (snapshot ?? {}) as { execution?: { status?: unknown; currentStepId?: unknown }; steps?: unknown };
  const steps = doc.steps !== null && typeof doc.steps === 'object' ? Object.keys(doc.steps) : [];
  const current = doc.execution?.currentStepId;
  return {
    status: typeof doc.execution?.status === 'string' ? doc.execution.status : 'unknown',
    lastStep: typeof current === 'string' ? current : (steps.at(-1) ?? null),
    steps: steps.length,
  };
}

/** How to open a backend (see `openBackend`). */
export interface OpenOptions {
  /** PostgreSQL schema of the tables (the stores' `schema` option). */
  schema?: string;
  /** Table or collection names the stores were given, by kind (`snapshots=my_snapshots`). */
  names?: Record<string, string>;
  /** MongoDB database, when the URL names none. */
  database?: string;
  /** go-go-scope's `keyPrefix`, under which `adopt --apply` keys the documents and rows it converts. */
  keyPrefix?: string;
}
