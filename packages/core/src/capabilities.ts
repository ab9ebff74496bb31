/**
 * What an adapter object can do. The conformance suite reads this to decide which cases
 * apply and reports every case it skipped with the capability that was missing.
 * Adapters detect capabilities from the server they talk to; they never pretend.
 */
export interface Capabilities {
  /** Expiry and leases are decided by the store's own clock (the database server's), never by the caller's `Date`. */
  readonly serverClock: boolean;
  /** Lock handles carry fencing tokens that strictly increase per key, forever. */
  readonly fencing: boolean;
  /** Expired data is also removed in the background by the backend (e.g. a MongoDB TTL index). */
  readonly ttlIndex: boolean;
  /** The backend can push changes to readers (change streams, LISTEN/NOTIFY, in-process events). */
  readonly changeFeed: boolean;
  /** Waiting lock acquisitions are woken by the backend when a lock is released, not only by polling. */
  readonly wakeups: boolean;
  /** Multi-document/row transactions are available. */
  readonly transactions: boolean;
  /** State is shared between processes (false for the in-memory adapter). */
  readonly crossProcess: boolean;
  /**
   * Conditional single-record updates are atomic: of concurrent compare-and-set writes, counter
   * increments or lease takeovers on one existing record none is lost and at most one wins.
   * Every real database is; an adapter sets `false` only on a backend known not to be (FerretDB
   * 1.x runs an update as a read followed by a separate write). Absent means `true`.
   */
  readonly atomicUpdates?: boolean;
}

export type CapabilityName = keyof Capabilities;

/** Capabilities an adapter may leave out of its manifest, meaning `true`. */
const ASSUMED_CAPABILITIES: ReadonlySet<CapabilityName> = new Set<CapabilityName>(['atomicUpdates']);

/** Whether a manifest grants `name` (an absent optional capability counts as granted). */
export function hasCapability(capabilities: Partial<Capabilities> | undefined, name: CapabilityName): boolean {
  const value = capabilities?.[name];
  return value === undefined ? ASSUMED_CAPABILITIES.has(name) : value === true;
}

export interface HasCapabilities {
  readonly capabilities: Capabilities;
}
