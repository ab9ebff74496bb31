/**
 * The fenced resource of the lock-safety check: one record per hot key, in a table or
 * collection of its own, written with the raw driver (never through stowage, which is what
 * is being tested). A write carries the writer's fencing token and is accepted only when the
 * token is higher than every token the record has accepted before.
 *
 * Three detectors read the record under the same atomic update as the fenced write:
 *
 * - overlap: the record's "current holder" marker names another holder who has not left the
 *   critical section yet, and whose lease intersects the writer's — two live leases on one
 *   key at once, which a correct lock never grants. Leases are compared on the lock store's
 *   own clock: granted at `expiresAt - ttl`, valid until `expiresAt`.
 * - stale write accepted: the latest accepted writer *started* acquiring after this writer's
 *   acquisition had *completed* — it is certainly the later holder — and yet this writer's
 *   token outbid it.
 * - current holder rejected: the latest accepted writer *completed* its acquisition before
 *   this writer started its own — it is certainly the earlier holder — and yet its token is
 *   not lower.
 *
 * The last two order acquisitions in real time, by when the client called and when it got the
 * handle, on the host's monotonic clock (`process.hrtime`, shared by every process on the
 * machine): when one acquisition ended before the other began, a correct lock must have given
 * it the lower fence. Acquisitions that overlapped in time are not ordered, and not judged.
 */
import pg from 'pg';
import type { Db } from 'mongodb';

export interface GuardState {
  /** Highest fence accepted so far. */
  fence: number;
  /** Accepted writes: the protected counter. */
  writes: number;
  /** Owner inside the critical section, or null. */
  holder: string | null;
  holderFence: number;
  holderGrant: number;
  holderExpires: number;
  /** Owner of the latest accepted write, and when its acquisition started and ended. */
  lastOwner: string | null;
  lastStart: number;
  lastEnd: number;
}

export interface Holder {
  owner: string;
  fence: number;
  /** Lease start and end, epoch ms on the lock store's clock. */
  grant: number;
  expires: number;
  /** When `acquire` was called and when it returned, ms on the host's monotonic clock. */
  start: number;
  end: number;
}

export interface WriteVerdict {
  accepted: boolean;
  /** Another holder's live lease intersects this one. */
  overlap: boolean;
  /** The latest accepted writer certainly acquired after this one. */
  stale: boolean;
  /** The latest accepted writer certainly acquired before this one. */
  later: boolean;
}

/** Milliseconds on the monotonic clock every process on this host shares. */
export function hostClock(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export const emptyGuardState = (): GuardState => ({
  fence: 0,
  writes: 0,
  holder: null,
  holderFence: 0,
  holderGrant: 0,
  holderExpires: 0,
  lastOwner: null,
  lastStart: 0,
  lastEnd: 0,
});

/** The fenced write, as a pure function of the stored state: what a storage system behind a lock does. */
export function decideWrite(state: GuardState, me: Holder): { next: GuardState | null; verdict: WriteVerdict } {
  const overlap =
    state.holder !== null &&
    state.holder !== me.owner &&
    Math.max(state.holderGrant, me.grant) < Math.min(state.holderExpires, me.expires);
  const other = state.lastOwner !== null && state.lastOwner !== me.owner;
  const stale = other && state.lastStart > me.end;
  const later = other && state.lastEnd < me.start;
  const accepted = me.fence > state.fence;
  const next = accepted
    ? {
        fence: me.fence,
        writes: state.writes + 1,
        holder: me.owner,
        holderFence: me.fence,
        holderGrant: me.grant,
        holderExpires: me.expires,
        lastOwner: me.owner,
        lastStart: me.start,
        lastEnd: me.end,
      }
    : null;
  return { next, verdict: { accepted, overlap, stale, later } };
}

/** Leaving the critical section clears the marker, if it is still ours. */
export function decideLeave(state: GuardState, me: Holder): GuardState | null {
  if (state.holder !== me.owner || state.holderFence !== me.fence) return null;
  return { ...state, holder: null };
}

/** Read-then-compare-and-swap storage for guard records; implementations are deliberately dumb. */
export interface GuardStore {
  read(resource: string): Promise<{ state: GuardState; version: number }>;
  /** True when the record was still at `version` and now holds `next`. */
  swap(resource: string, version: number, next: GuardState): Promise<boolean>;
  close(): Promise<void>;
}

const MAX_SWAP_ATTEMPTS = 1000;

/** Applies `decide` atomically (optimistic retry on a concurrent change). */
export async function updateGuard<T>(
  store: GuardStore,
  resource: string,
  decide: (state: GuardState) => { next: GuardState | null; result: T },
): Promise<T> {
  for (let attempt = 0; attempt < MAX_SWAP_ATTEMPTS; attempt++) {
    const { state, version } = await store.read(resource);
    const { next, result } = decide(state);
    if (next === null || (await store.swap(resource, version, next))) return result;
  }
  throw new Error(`guard record ${resource} kept changing: ${MAX_SWAP_ATTEMPTS} swap attempts failed`);
}

export async function guardedWrite(store: GuardStore, resource: string, me: Holder): Promise<WriteVerdict> {
  return updateGuard(store, resource, (state) => {
    const { next, verdict } = decideWrite(state, me);
    return { next, result: verdict };
  });
}

export async function leaveGuard(store: GuardStore, resource: string, me: Holder): Promise<void> {
  await updateGuard(store, resource, (state) => ({ next: decideLeave(state, me), result: undefined }));
}

export class MemoryGuardStore implements GuardStore {
  readonly #records = new Map<string, { state: GuardState; version: number }>();

  async read(resource: string) {
    const record = this.#records.get(resource) ?? { state: emptyGuardState(), version: 0 };
    return { state: { ...record.state }, version: record.version };
  }

  async swap(resource: string, version: number, next: GuardState) {
    const current = this.#records.get(resource)?.version ?? 0;
    if (current !== version) return false;
    this.#records.set(resource, { state: { ...next }, version: version + 1 });
    return true;
  }

  async close() {}
}

/** One row per resource: `(resource text primary key, state jsonb, version bigint)`. */
export class PostgresGuardStore implements GuardStore {
  private readonly client: pg.Client;
  private readonly table: string;

  private constructor(client: pg.Client, table: string) {
    this.client = client;
    this.table = table;
  }

  /** Opens the guard table `schema.table`, creating both when `create` (the parent does, before any worker starts). */
  static async open(url: string, schema: string, table: string, create: boolean): Promise<PostgresGuardStore> {
    for (const name of [schema, table]) {
      if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`bad guard identifier ${name}`);
    }
    const client = new pg.Client({ connectionString: url, application_name: 'stowage-reliability-guard' });
    await client.connect();
    if (create) {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${schema}.${table} (resource text PRIMARY KEY, state jsonb NOT NULL, version bigint NOT NULL)`,
      );
    }
    return new PostgresGuardStore(client, `${schema}.${table}`);
  }

  async read(resource: string) {
    const { rows } = await this.client.query<{ state: GuardState; version: string }>(
      `SELECT state, version FROM ${this.table} WHERE resource = $1`,
      [resource],
    );
    const row = rows[0];
    return row ? { state: row.state, version: Number(row.version) } : { state: emptyGuardState(), version: 0 };
  }

  async swap(resource: string, version: number, next: GuardState) {
    const result =
      version === 0
        ? await this.client.query(
            `INSERT INTO ${this.table} (resource, state, version) VALUES ($1, $2, 1) ON CONFLICT (resource) DO NOTHING`,
            [resource, JSON.stringify(next)],
          )
        : await this.client.query(`UPDATE ${this.table} SET state = $2, version = version + 1 WHERE resource = $1 AND version = $3`, [
            resource,
            JSON.stringify(next),
            version,
          ]);
    return result.rowCount === 1;
  }

  async close() {
    await this.client.end();
  }
}

interface GuardDocument {
  _id: string;
  state: GuardState;
  version: number;
}

/** One document per resource: `{ _id: resource, state, version }`. */
export class MongoGuardStore implements GuardStore {
  private readonly db: Db;
  private readonly collection: string;
  private readonly onClose: () => Promise<void>;

  constructor(db: Db, collection: string, onClose: () => Promise<void>) {
    this.db = db;
    this.collection = collection;
    this.onClose = onClose;
  }

  async read(resource: string) {
    const doc = await this.db.collection<GuardDocument>(this.collection).findOne({ _id: resource });
    return doc ? { state: doc.state, version: doc.version } : { state: emptyGuardState(), version: 0 };
  }

  async swap(resource: string, version: number, next: GuardState) {
    const collection = this.db.collection<GuardDocument>(this.collection);
    if (version === 0) {
      try {
        await collection.insertOne({ _id: resource, state: next, version: 1 });
        return true;
      } catch (error) {
        if ((error as { code?: number }).code === 11000) return false;
        throw error;
      }
    }
    const result = await collection.updateOne({ _id: resource, version }, { $set: { state: next }, $inc: { version: 1 } });
    return result.modifiedCount === 1;
  }

  async close() {
    await this.onClose();
  }
}
