import type { DatabaseTransaction } from '../contracts/common.js';
import type {
  ClaimRequest,
  CreateItemRequest,
  ExtendLeaseRequest,
  FindClaimableRequest,
  ListItemsRequest,
  ProcessBackend,
  ProcessChange,
  ProcessFeed,
  ProcessItem,
  ReleaseRequest,
  TransitionRecord,
  TransitionRequest,
} from '../contracts/process.js';
import {
  assertClaimRequest,
  assertCreateItemRequest,
  assertFindClaimableRequest,
  assertItemId,
  assertListItemsRequest,
  assertProcessName,
  assertReleaseRequest,
  assertStateName,
  assertTransitionRequest,
} from '../process/validation.js';
import { StowageError } from '../errors.js';
import {
  processClaimChannel,
  processTransitionChannel,
  type ProcessClaimMessage,
  type ProcessTransitionMessage,
  type StoreIdentity,
} from '../diagnostics.js';
import { retentionOf } from './retention.js';
import { StoreBase, callerCode, type StoreHandle } from './store.js';

/**
 * The {@link ProcessBackend} behaviour every backend shares: state, and every request
 * validated with the same codes before the backend sees it. The backend implements the `_`
 * methods (one compare-and-set each, on the database clock) and its change feed.
 *
 * For telemetry it reports creations and transitions (`stowage:process.transition`) and each
 * item's first claim in a state with how long the item waited for it (`stowage:process.claim`).
 */
export abstract class ProcessBackendBase extends StoreBase implements ProcessBackend {
  /** `historyRetention`, when given: ms after which a transition record goes. */
  protected readonly historyRetention: number | undefined;

  /** `options.historyRetention`: as the backend was given it (validated here). */
  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: { historyRetention?: unknown } = {}) {
    super(identity, handle, 'process');
    this.historyRetention = retentionOf(options.historyRetention, 'historyRetention');
  }

  /**
   * Deletes transition records older than `historyRetention` ms, in batches (a `close()`
   * meanwhile stops it between batches); how many. `E_INVALID_OPTION` without that option. The
   * background sweeper runs it where the backend has one.
   */
  clearHistory(): Promise<number> {
    return this.call('process.clearHistory', () => {
      const retention = this.historyRetention;
      if (retention === undefined || !this._clearHistory) throw new StowageError('E_INVALID_OPTION', 'clearHistory needs the historyRetention option');
      return this._clearHistory(retention);
    });
  }

  createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    return this.call('process.createItem', async () => {
      assertCreateItemRequest(request);
      const outcome = await this._createItem(request);
      if (outcome.created) this.#transitioned({ process: request.process, from: null, to: request.state, kind: 'create' });
      return outcome;
    }, request?.id);
  }

  getItem(processName: string, id: string): Promise<ProcessItem | null> {
    return this.call('process.getItem', () => {
      assertProcessName(processName);
      assertItemId(id);
      return this._getItem(processName, id);
    }, id);
  }

  listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    return this.call('process.listItems', () => {
      assertListItemsRequest(request);
      return this._listItems(request);
    });
  }

  history(processName: string, id: string): Promise<TransitionRecord[]> {
    return this.call('process.history', () => {
      assertProcessName(processName);
      assertItemId(id);
      return this._history(processName, id);
    }, id);
  }

  openFeed(processName: string, state: string, position: string | null): Promise<ProcessFeed> {
    return this.call('process.openFeed', () => {
      assertProcessName(processName);
      assertStateName(state);
      return this._openFeed(processName, state, position);
    });
  }

  findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    return this.call('process.findClaimable', () => {
      assertFindClaimableRequest(request);
      return this._findClaimable(request);
    });
  }

  claim(request: ClaimRequest): Promise<ProcessItem | null> {
    return this.call('process.claim', async () => {
      assertClaimRequest(request);
      const item = await this._claim(request);
      if (item?.attempts === 1 && item.leaseUntil !== null && processClaimChannel.hasSubscribers) {
        // The lease was set to `lease` ms from the claim, on the same clock as updatedAt.
        const lag = item.leaseUntil.getTime() - request.lease - item.updatedAt.getTime();
        processClaimChannel.publish({ store: this.identity, process: request.process, state: request.state, lag } satisfies ProcessClaimMessage);
      }
      return item;
    }, request?.itemId);
  }

  extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    return this.call('process.extendLease', () => {
      assertClaimRequest(request);
      return this._extendLease(request);
    }, request?.itemId);
  }

  release(request: ReleaseRequest): Promise<boolean> {
    return this.call('process.release', () => {
      assertReleaseRequest(request);
      return this._release(request);
    }, request?.itemId);
  }

  transition(request: TransitionRequest): Promise<ProcessItem | null> {
    return this.call('process.transition', async () => {
      assertTransitionRequest(request);
      const item = await this._transition(request);
      if (item !== null) this.#transitioned({ process: request.process, from: request.from, to: request.to, kind: request.kind });
      return item;
    }, request?.itemId);
  }

  /** Runs `fn` in a new transaction on the backend's connection (see `ProcessBackend.transaction`). */
  transaction<T>(fn: (transaction: DatabaseTransaction) => Promise<T>): Promise<T> {
    return this.call('process.transaction', () => {
      if (typeof fn !== 'function') throw new StowageError('E_INVALID_OPTION', 'transaction needs a function to run');
      return this.runInTransaction((_view, transaction) => callerCode(() => fn(transaction)));
    });
  }

  #transitioned(transition: Omit<ProcessTransitionMessage, 'store'>): void {
    if (processTransitionChannel.hasSubscribers) processTransitionChannel.publish({ store: this.identity, ...transition } satisfies ProcessTransitionMessage);
  }

  // --- backend operations (see ProcessBackend for what each promises) -------------------

  protected abstract _createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }>;
  protected abstract _getItem(processName: string, id: string): Promise<ProcessItem | null>;
  protected abstract _listItems(request: ListItemsRequest): Promise<ProcessItem[]>;
  protected abstract _history(processName: string, id: string): Promise<TransitionRecord[]>;
  /** Deletes transition records older than `retention` ms (see {@link clearHistory}); a backend with retention implements it. */
  protected _clearHistory?(retention: number): Promise<number>;
  protected abstract _openFeed(processName: string, state: string, position: string | null): Promise<ProcessFeed>;
  protected abstract _findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]>;
  protected abstract _claim(request: ClaimRequest): Promise<ProcessItem | null>;
  protected abstract _extendLease(request: ExtendLeaseRequest): Promise<boolean>;
  protected abstract _release(request: ReleaseRequest): Promise<boolean>;
  protected abstract _transition(request: TransitionRequest): Promise<ProcessItem | null>;
}
