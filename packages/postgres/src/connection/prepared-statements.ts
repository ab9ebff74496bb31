import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { driverError, sqlState } from '../errors.js';
import type { ClientCallback } from './checkout.js';
import type { PostgresPoolClient, PostgresQueryResult, PostgresStatement } from './types.js';

/**
 * How statements with parameters are sent:
 * - `shared`: named after their text, the same name on every connection (the default);
 * - `per-client`: named after their text and the pg client, when the server answers a Parse
 *   with "already exists" (42P05): several clients share one server session, as with PGlite's
 *   socket server, so a name one client prepared is there for the others, unknown to their pg;
 * - `off`: unnamed, parsed and planned on every call: `preparedStatements: false`, or the server
 *   did not know a statement the client had prepared (26000: a pooler swapped the session).
 */
type PreparedStatementMode = 'shared' | 'per-client' | 'off';

/** Texts of statements that always go out unnamed (see {@link plannedEachCall}). */
const plannedEachCallTexts = new Set<string>();

/**
 * Marks a statement's text as one to send unnamed, so the server plans it for each call's
 * parameters and never switches to a generic plan: for statements whose best plan depends on
 * them (a key range that holds a few rows or nearly the whole table). Returns the text.
 */
export function plannedEachCall(text: string): string {
  plannedEachCallTexts.add(text);
  return text;
}

const DUPLICATE_PREPARED_STATEMENT = '42P05';
const UNKNOWN_PREPARED_STATEMENT = '26000';
/** Stores send a fixed set of texts; this bounds the cache should that ever change. */
const MAX_PREPARED_STATEMENTS = 500;
/**
 * In `per-client` mode, clients beyond this many run unnamed: prepared statements live as long
 * as the shared session, not the client, so the count of names must stay bounded.
 */
const MAX_NAMING_CLIENTS = 64;
/** Keeps per-client names of different processes on one shared session apart. */
const PROCESS_TAG = randomBytes(4).toString('hex');
let clientSerial = 0;

/**
 * How the statements of one pool are sent (see {@link PreparedStatementMode}): the names of
 * its prepared statements, and the mode the server's answers have left it in. One per
 * `SharedPool` (pool.ts), so every store on the pool learns from what the server said to any.
 */
export class PreparedStatements {
  #prepared: PreparedStatementMode = 'shared';
  readonly #statementNames = new Map<string, string>();
  /** Per-client name suffixes (`per-client` mode), and how many clients got one. */
  readonly #clientSuffixes = new WeakMap<object, string>();
  #namingClients = 0;

  /**
   * Runs one statement on a client from `take` (`PoolCheckout.take`); retries once unnamed or
   * with client names when the session says so. Callbacks all the way down, as `pool.query`
   * does: one promise per statement.
   */
  query(take: (done: ClientCallback) => void, text: string, values: unknown[] | undefined, prepare: boolean): Promise<PostgresQueryResult> {
    return new Promise((resolve, reject) => this.#send(take, text, values, prepare, resolve, reject));
  }

  /** One attempt of {@link query}: settles it, or sends again after a 42P05 or 26000 in the mode that answer leaves. */
  #send(
    take: (done: ClientCallback) => void,
    text: string,
    values: unknown[] | undefined,
    prepare: boolean,
    resolve: (result: PostgresQueryResult) => void,
    reject: (error: unknown) => void,
  ): void {
    const name = values === undefined || !prepare || this.#prepared === 'off' || plannedEachCallTexts.has(text) ? undefined : this.#statementName(text);
    const mode = name === undefined ? 'off' : this.#prepared;
    const failed = (error: unknown) => {
      const state = sqlState(error);
      if (mode !== 'off' && (state === DUPLICATE_PREPARED_STATEMENT || state === UNKNOWN_PREPARED_STATEMENT)) {
        // The statement did not run (Parse or Bind failed), so it is safe to run it again.
        if (this.#prepared === mode) this.#prepared = mode === 'shared' && state === DUPLICATE_PREPARED_STATEMENT ? 'per-client' : 'off';
        this.#send(take, text, values, prepare, resolve, reject);
      } else reject(driverError(error));
    };
    take((error, client) => {
      if (error !== undefined) return failed(error);
      const statement =
        mode === 'off' ? { text, values } : mode === 'shared' ? { name, text, values } : this.#clientStatement(client!, name!, text, values);
      runOn(client!, statement, (error, result) => (error === undefined ? resolve(result!) : failed(error)));
    });
  }

  /** A name derived from the text, so every connection and process uses the same one. */
  #statementName(text: string): string | undefined {
    let name = this.#statementNames.get(text);
    if (name === undefined && this.#statementNames.size < MAX_PREPARED_STATEMENTS) {
      name = `stowage_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
      this.#statementNames.set(text, name);
    }
    return name;
  }

  /** The statement under a name only this pg client uses (see `per-client`). */
  #clientStatement(client: object, name: string, text: string, values: unknown[] | undefined): PostgresStatement {
    let suffix = this.#clientSuffixes.get(client);
    if (suffix === undefined && this.#namingClients < MAX_NAMING_CLIENTS) {
      this.#namingClients++;
      suffix = `${PROCESS_TAG}${++clientSerial}`;
      this.#clientSuffixes.set(client, suffix);
    }
    return suffix === undefined ? { text, values } : { name: `${name}_${suffix}`, text, values };
  }
}

/**
 * One statement on a checked-out client, released afterwards. As `pool.query` does: while the
 * client is checked out, an error its connection raises outside the query (a reset socket)
 * fails the call instead of crashing the process, and a client that failed is not reused.
 */
function runOn(client: PostgresPoolClient, statement: PostgresStatement, done: (error: Error | undefined, result?: PostgresQueryResult) => void): void {
  let settled = false;
  const settle = (error: Error | undefined, result?: PostgresQueryResult) => {
    if (settled) return;
    settled = true;
    client.removeListener('error', settle);
    client.release(error);
    done(error, result);
  };
  client.on('error', settle);
  const failed = (error: unknown) => settle(error instanceof Error ? error : new Error(String(error)));
  try {
    // pg's own client takes a callback (no promise of its own); a client like it (a wrapper) may only have the promise form.
    if (client instanceof pg.Client) client.query(statement, (error: Error | null, result: PostgresQueryResult) => (error ? failed(error) : settle(undefined, result)));
    else client.query(statement).then((result) => settle(undefined, result), failed);
  } catch (error) {
    failed(error);
  }
}
