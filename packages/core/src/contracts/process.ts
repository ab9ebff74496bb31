import type { JsonObject } from '../json.js';
import type { DatabaseTransaction, ScanOptions, StowageResource } from './common.js';
import type { KeyValueStore } from './kv.js';

/*
 * Durable processes (state machines) on change feeds, as in "State machine using MongoDB
 * changestreams".
 *
 * A *process* is a set of named states. Items (one per device, order, …) move through them:
 * each non-terminal state has a handler that does the work for an item in that state and
 * returns where the item goes next. Workers react to items entering their states through the
 * backend's change feed, keep a resume token per worker and state in a KeyValueStore, and
 * claim an item (a lease on the database clock) before running its handler. A transition is
 * a compare-and-set on the item's state and version, so two workers never both advance an
 * item; a crashed worker's lease runs out and another worker retries the item.
 *
 * The engine (`bindProcess`, `ProcessWorker`) is generic; each adapter implements only
 * {@link ProcessBackend}.
 */

/** One item of a process, as stored. Times are on the database's clock. */
export interface ProcessItem<TData extends JsonObject = JsonObject> {
  /** The item's id, unique within its process (the rules of keys: non-empty, at most 1024 UTF-8 bytes). */
  readonly id: string;
  readonly state: string;
  readonly data: TData;
  /**
   * 1 when the item is created, +1 on every transition. Together with `state` it identifies
   * one stay of the item in one state; transitions compare-and-set on it.
   */
  readonly version: number;
  /** Claims of the item in its current state so far (1 while the first attempt runs); 0 until claimed. */
  readonly attempts: number;
  /** The error of the last failed attempt (or why the item was dead-lettered); `null` when none. */
  readonly lastError: string | null;
  /** The worker that holds (or last held) a claim on the item in this state; `null` until claimed. */
  readonly leaseOwner: string | null;
  /** Until when the item is invisible to other workers (running, or waiting for a retry); `null` until claimed. */
  readonly leaseUntil: Date | null;
  readonly createdAt: Date;
  /** When the item entered its current state. */
  readonly updatedAt: Date;
}

export type TransitionKind = 'create' | 'advance' | 'dead-letter';

/** One entry of an item's transition log, oldest first in {@link ProcessBackend.history}. */
export interface TransitionRecord {
  readonly itemId: string;
  /** `null` for the entry that created the item. */
  readonly from: string | null;
  readonly to: string;
  /** The item's version after this transition (1 for the creation). */
  readonly version: number;
  readonly kind: TransitionKind;
  /** The idempotency key handed to the handler whose result this transition applied; `null` for the creation. */
  readonly key: string | null;
  /** The error that sent the item to the dead-letter state; `null` otherwise. */
  readonly error: string | null;
  readonly at: Date;
}

// ---------------------------------------------------------------------------------------
// The backend: what an adapter implements (one file per adapter).
// ---------------------------------------------------------------------------------------

/** An item that entered a state, as a change feed or a recovery scan reports it. */
export interface ProcessChange {
  readonly itemId: string;
  readonly state: string;
  /** The item's version when it entered `state`; a claim succeeds only while it is unchanged. */
  readonly version: number;
  /**
   * The feed position just after this change: a resume token to pass back to
   * {@link ProcessBackend.openFeed}. Empty for changes that do not come from a durable feed.
   */
  readonly position: string;
}

export interface ProcessFeedReadOptions {
  /** At most this many changes. */
  limit: number;
  /** When no change is ready, wait up to this many ms for one (woken by the backend where it can). */
  wait: number;
  signal?: AbortSignal;
}

/**
 * An ordered reader of items entering one state of one process. Every change that happens
 * after the reader's start position is returned exactly once, in order (including changes
 * whose items have moved on since: the claim sorts those out).
 */
export interface ProcessFeed {
  /**
   * True when positions are resume tokens worth persisting (a transition log, a change
   * stream). A polling feed that re-reads the set of items waiting in the state has nothing
   * to resume and is not durable.
   */
  readonly durable: boolean;
  /**
   * True when the feed starts exactly after the position it was opened with. False when it was
   * opened without a position, or the position is no longer available (e.g. a change stream
   * token that fell off the oplog): it then starts at "now", and the engine scans the items
   * already waiting in the state.
   */
  readonly resumed: boolean;
  /** The next changes after those already read; `[]` when none arrived within `wait`. */
  read(options: ProcessFeedReadOptions): Promise<ProcessChange[]>;
  close(): Promise<void>;
}

export interface CreateItemRequest {
  process: string;
  id: string;
  state: string;
  data: JsonObject;
}

export interface ListItemsRequest {
  process: string;
  /** Only items in this state. */
  state?: string;
  /** Only ids after this one, for paging (ids ascend in code-point order, which is UTF-8 byte order). */
  after?: string;
  limit: number;
}

export interface FindClaimableRequest {
  process: string;
  state: string;
  /**
   * Also items that nobody has claimed in this state yet. Without it, only items whose claim
   * ran out: a crashed worker's lease, a retry whose backoff is over, an item handed back.
   */
  includeUnclaimed: boolean;
  /**
   * With `includeUnclaimed: false`: also items nobody has claimed that entered the state at
   * least this many ms ago (database clock). The engine's safety net for changes a feed
   * delivers late or not at all.
   */
  unclaimedFor?: number;
  limit: number;
}

export interface ClaimRequest {
  process: string;
  itemId: string;
  state: string;
  version: number;
  /** The claiming worker's owner token (unique per worker incarnation). */
  owner: string;
  /** Lease length in ms, on the database clock. */
  lease: number;
}

export interface ExtendLeaseRequest {
  process: string;
  itemId: string;
  version: number;
  owner: string;
  lease: number;
}

export interface ReleaseRequest {
  process: string;
  itemId: string;
  version: number;
  owner: string;
  /** The item becomes claimable again this many ms from now (0: at once). */
  delay: number;
  /** Give the attempt back (a hand-back on shutdown, a `wait` result): `attempts` goes down by one. */
  refundAttempt: boolean;
  /** Stored as `lastError` when given. */
  error?: string;
}

export interface TransitionRequest {
  process: string;
  itemId: string;
  from: string;
  /** The version the handler saw; the transition applies only while the item still has it. */
  version: number;
  to: string;
  /** Replaces the item's data when given. */
  data?: JsonObject;
  kind: Exclude<TransitionKind, 'create'>;
  /** The idempotency key the handler was given, stored in the transition log. */
  key: string;
  error?: string;
}

/**
 * Storage for process items, their transition log and the change feed. One object may hold
 * any number of processes (every call names its process). Implementations:
 * `createMemoryProcessBackend` (`@stowage/core/memory`), `createPostgresProcessBackend`,
 * `createMongoProcessBackend`. The conformance suite (`describeProcess`) checks them.
 *
 * Every state-changing call is one compare-and-set that names the item's version, on the
 * database's clock; a transition and its log entry are written together, atomically.
 */
export interface ProcessBackend extends StowageResource {
  /** Creates the item in `state` at version 1 with a `create` log entry; an existing id is left as is. */
  createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }>;
  getItem(processName: string, id: string): Promise<ProcessItem | null>;
  /** Items in ascending id order. */
  listItems(request: ListItemsRequest): Promise<ProcessItem[]>;
  /** The item's transition log, oldest first; `[]` for an unknown id. */
  history(processName: string, id: string): Promise<TransitionRecord[]>;

  /**
   * A feed of items entering `state`, starting right after `position` (a `ProcessChange.position`
   * from an earlier durable feed), or at "now" when `position` is `null`.
   */
  openFeed(processName: string, state: string, position: string | null): Promise<ProcessFeed>;
  /** Items in `state` that can be claimed now (see {@link FindClaimableRequest}). */
  findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]>;

  /**
   * Claims the item if it is still in `state` at `version` and nobody holds a live lease on it:
   * sets the lease and counts an attempt. `null` when it cannot be claimed.
   */
  claim(request: ClaimRequest): Promise<ProcessItem | null>;
  /**
   * Sets the lease to `lease` ms from now if `owner` made the last claim on the item at
   * `version` (a lease that ran out is still its owner's until another worker claims the item).
   */
  extendLease(request: ExtendLeaseRequest): Promise<boolean>;
  /**
   * Ends `owner`'s lease: the item becomes claimable again after `delay` ms (a retry's
   * backoff, 0 to hand it back). False when `owner` no longer holds the item at `version`.
   */
  release(request: ReleaseRequest): Promise<boolean>;
  /**
   * Moves the item from `from` to `to` if it is still in `from` at `version`, clears its lease
   * and attempts, and appends the log entry in the same atomic write. `null` when the item
   * moved on (another worker advanced it).
   */
  transition(request: TransitionRequest): Promise<ProcessItem | null>;

  /**
   * Runs `fn` in a new database transaction on the backend's own connection, commits it when
   * `fn` resolves and rolls it back when it rejects: the engine runs `transactional` states in
   * one, writing the transition through {@link withTransaction}. `fn` may run again when the
   * database asks for the transaction to be retried (a write conflict). Optional: backends on a
   * database with transactions have it; it rejects with `E_INVALID_OPTION` on a server without.
   */
  transaction?<T>(fn: (transaction: DatabaseTransaction) => Promise<T>): Promise<T>;
  /**
   * This backend inside a transaction the caller holds (see `KeyValueStore.withTransaction`):
   * every item operation joins it; a feed keeps its own connection (`openFeed` refuses). Optional.
   */
  withTransaction?(transaction: DatabaseTransaction): this;
}

// ---------------------------------------------------------------------------------------
// Defining a process.
// ---------------------------------------------------------------------------------------

/**
 * What a handler returns: the next state's name, the next state with new data, or
 * `{ wait }` to stay in the state and be called again after `wait` ms (the attempt is not
 * counted: for "the device is offline, check again in an hour").
 */
export type HandlerResult<TData extends JsonObject, TTarget extends string> =
  | TTarget
  | { to: TTarget; data?: TData }
  | { wait: number };

export interface HandlerContext {
  /**
   * The same for every delivery of this item in this state (retries, redeliveries after a
   * crash), different for every other stay. Use it to make side effects idempotent.
   */
  readonly idempotencyKey: string;
  /** 1 on the first attempt in this state. */
  readonly attempt: number;
  /** Aborts when the worker shuts down past its grace period, or the claim was lost. */
  readonly signal: AbortSignal;
  /** The worker's name. */
  readonly worker: string;
  /**
   * In a `transactional` state (see {@link StateDefinition.transactional}): the database
   * transaction the handler writes its effects through (a `pg` client on Postgres, a MongoDB
   * `ClientSession`), e.g. `kv.withTransaction(context.transaction)`. The worker writes the
   * item's transition through it too, then commits. Absent in other states.
   */
  readonly transaction?: DatabaseTransaction;
}

/**
 * An async function (its result type is a promise so that TypeScript keeps returned state
 * names as literals and checks them against the process's states). Throwing counts as a
 * failed attempt: the item is retried with backoff, and dead-lettered after `maxAttempts`.
 */
export type StateHandler<TData extends JsonObject, TTarget extends string> = (
  item: ProcessItem<TData>,
  context: HandlerContext,
) => Promise<HandlerResult<TData, TTarget>>;

/** `initial * factor^(attempt-1)`, capped at `max`, with up to `jitter` (0..1) of it taken off at random. */
export interface BackoffOptions {
  /** Delay after the first failure, in ms (default 1000). */
  initial?: number;
  /** Growth per further failure (default 2). */
  factor?: number;
  /** Largest delay, in ms (default 300000: five minutes). */
  max?: number;
  /** Fraction of the delay randomised away, 0..1 (default 0.2). */
  jitter?: number;
}

export interface RetryOptions {
  /** Attempts in one state before the item goes to the dead-letter state (default 5). */
  maxAttempts?: number;
  /** How long to wait before attempt n+1 after attempt n failed: options, or a function of n. */
  backoff?: BackoffOptions | ((attempt: number) => number);
}

export interface StateDefinition<TData extends JsonObject, TTarget extends string> {
  handler: StateHandler<TData, TTarget>;
  /** Items of this state one worker runs at once (default 1). */
  concurrency?: number;
  /** Overrides the process's `retry` for this state. */
  retry?: RetryOptions;
  /** Lease per claim, in ms on the database clock; the worker extends it while the handler runs (default: the process's). */
  lease?: number;
  /**
   * Run the handler and the item's transition in one database transaction (default false).
   * The handler gets it as `context.transaction` and writes its database effects through it;
   * the worker writes the transition through the same transaction and commits. The effects and
   * the move to the next state commit together or not at all: a crash, a failure or a lost
   * race (another worker advanced the item first) rolls the effects back, so they apply
   * exactly once per stay in the state. A `{ wait }` result commits them with the release.
   *
   * The handler may run again in the same attempt when the database asks for the transaction
   * to be retried (a write conflict): only what it wrote through the transaction is rolled
   * back. Needs a backend with transactions (`ProcessBackend.transaction`): Postgres, MongoDB
   * replica sets; a worker refuses to start such a state elsewhere (`E_INVALID_OPTION`).
   */
  transactional?: boolean;
}

export interface ProcessDefinitionInput<TData extends JsonObject, TActive extends string, TTerminal extends string> {
  /** Letters, digits, `_`, `.`, `-`; starts with a letter; at most 63 characters. */
  name: string;
  /** The state items start in. */
  initial: NoInfer<TActive>;
  /** Each state with work to do, and its handler. */
  states: { [S in TActive]: StateDefinition<TData, NoInfer<TActive | TTerminal>> };
  /** States that end the process. Items there are never touched again. */
  terminal: readonly TTerminal[];
  /** Where items go after `maxAttempts` failures; must be one of `terminal` (default: `"failed"`, which must then be listed). */
  deadLetter?: NoInfer<TTerminal>;
  /** Default retry policy for every state. */
  retry?: RetryOptions;
  /** Default lease per claim in ms (default 30000). */
  lease?: number;
}

/** A validated process definition, from {@link defineProcess}. */
export interface ProcessDefinition<
  TData extends JsonObject = JsonObject,
  TActive extends string = string,
  TTerminal extends string = string,
> {
  readonly name: string;
  readonly initial: TActive;
  readonly states: { readonly [S in TActive]: StateDefinition<TData, TActive | TTerminal> };
  readonly terminal: readonly TTerminal[];
  readonly deadLetter: TTerminal;
  readonly retry: RetryOptions;
  readonly lease: number;
  /** Active states, in definition order. */
  readonly activeStates: readonly TActive[];
}

// ---------------------------------------------------------------------------------------
// Running a process.
// ---------------------------------------------------------------------------------------

/** What a worker reports as it goes (pass `onEvent`); handy for logs and metrics. */
export type ProcessEvent =
  | { type: 'feed-opened'; state: string; resumed: boolean; durable: boolean; position: string | null }
  | { type: 'claimed'; state: string; itemId: string; version: number; attempt: number; source: 'feed' | 'backlog' | 'recovery' }
  | { type: 'advanced'; state: string; itemId: string; to: string; version: number; key: string }
  | { type: 'waiting'; state: string; itemId: string; delay: number }
  | { type: 'retry'; state: string; itemId: string; attempt: number; delay: number; error: string }
  | { type: 'dead-lettered'; state: string; itemId: string; attempt: number; error: string }
  /** Another worker advanced the item first; this worker's result was dropped. */
  | { type: 'conflict'; state: string; itemId: string; version: number }
  /** Shut down before the handler finished: the claim was given back for another worker. */
  | { type: 'handed-back'; state: string; itemId: string; version: number }
  | { type: 'cursor-saved'; state: string; position: string }
  | { type: 'error'; state: string | null; during: string; error: unknown }
  | { type: 'stopped'; handedBack: number };

export interface ProcessWorkerOptions {
  /**
   * The worker's stable name (e.g. a StatefulSet pod name). Its cursors are stored under it,
   * so a restarted worker with the same name resumes where the previous one stopped. Letters,
   * digits, `_`, `.`, `-`; at most 128 characters.
   */
  name: string;
  /** States this worker runs (default: every active state). */
  states?: readonly string[];
  /** Where cursors (resume tokens) are stored. Required for durable feeds to resume. */
  cursors: KeyValueStore;
  /** Prefix of the cursor keys (default `"stowage:process:"`). */
  cursorPrefix?: string;
  /** Per-state concurrency overrides for this worker. */
  concurrency?: Readonly<Record<string, number>>;
  /** Fallback polling interval of the feeds in ms, when no wake-up arrives (default 1000). */
  pollInterval?: number;
  /** How often to look for items whose claim ran out, in ms (default: a quarter of the shortest lease, at most 5000). */
  recoveryInterval?: number;
  /**
   * The recovery scan also claims items that entered a state this many ms ago and were never
   * claimed (default 30000): a safety net should a feed be held back (on Postgres, by a
   * long-running transaction) or miss a change. Normally the feed delivers them at once.
   */
  unclaimedAfter?: number;
  /** Persist cursors at most this often, in ms (default 1000); always on shutdown. */
  cursorInterval?: number;
  /** How long `stop()` waits for running handlers before handing their items back, in ms (default 10000). */
  shutdownTimeout?: number;
  onEvent?: (event: ProcessEvent) => void;
}

export interface ProcessWorker {
  readonly name: string;
  /** Opens the feeds and starts working. Resolves once every feed is open. */
  start(): Promise<void>;
  /**
   * Graceful shutdown: stops claiming, lets running handlers finish for up to `shutdownTimeout`
   * ms, hands back the items of those that did not (their signal aborts), persists the
   * cursors. Idempotent.
   */
  stop(): Promise<void>;
  /**
   * `start()`, then run until SIGTERM or SIGINT (or `stop()`), then shut down gracefully.
   * The signal listeners are removed afterwards.
   */
  run(): Promise<void>;
  /** Resolves when the worker has stopped. */
  readonly stopped: Promise<void>;
}

export interface StartItemOptions<TActive extends string> {
  /** Start somewhere other than the process's initial state. */
  state?: TActive;
}

export interface ListProcessItemsOptions<TState extends string> {
  state?: TState;
  after?: string;
  /** Default 100, at most 10000. */
  limit?: number;
}

/** A process bound to a backend: start items, read them, run workers. */
export interface BoundProcess<TData extends JsonObject = JsonObject, TActive extends string = string, TTerminal extends string = string> {
  readonly definition: ProcessDefinition<TData, TActive, TTerminal>;
  readonly backend: ProcessBackend;
  /** Creates the item in the initial state; an existing id is returned unchanged with `created: false`. */
  start(id: string, data: TData, options?: StartItemOptions<TActive>): Promise<{ item: ProcessItem<TData>; created: boolean }>;
  get(id: string): Promise<ProcessItem<TData> | null>;
  list(options?: ListProcessItemsOptions<TActive | TTerminal>): Promise<ProcessItem<TData>[]>;
  /** Every item (or those in `state`), by ascending id, streamed in pages of `pageSize` (default 1000). */
  scan(options?: { state?: TActive | TTerminal } & ScanOptions): AsyncIterable<ProcessItem<TData>>;
  history(id: string): Promise<TransitionRecord[]>;
  /** A worker for some or all of the process's states (call `start()` or `run()` on it). */
  worker(options: ProcessWorkerOptions): ProcessWorker;
}
