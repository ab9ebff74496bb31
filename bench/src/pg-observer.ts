/**
 * Sees every statement the `pg` driver sends, from any pool or client in this process
 * (stowage's, the raw baseline's, @keyv/postgres's: they all resolve to the same `pg`).
 * One `Client#query` call is one round trip: pg sends Parse/Bind/Execute/Sync in one write
 * and waits for ReadyForQuery. A recorder is installed only while something is counted, so
 * the cost outside counting is a single null check.
 */
import pg from 'pg';

export interface PgStatement {
  text: string;
  values: unknown[] | undefined;
  /** Prepared-statement name, when the caller used one. */
  name: string | undefined;
  /** The client that ran it (to tell a dedicated transaction client from pool.query). */
  client: object;
}

type Recorder = (statement: PgStatement) => void;

let recorder: Recorder | null = null;
let installed = false;

export function installPgObserver(): void {
  if (installed) return;
  installed = true;
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function observedQuery(this: object, ...args: unknown[]): unknown {
    if (recorder !== null) recorder(toStatement(this, args));
    return original.apply(this, args);
  };
}

function toStatement(client: object, args: unknown[]): PgStatement {
  const [first, second] = args;
  if (typeof first === 'string') {
    return { text: first, values: Array.isArray(second) ? second : undefined, name: undefined, client };
  }
  const config = (first ?? {}) as { text?: unknown; values?: unknown; name?: unknown; submit?: unknown };
  const values = Array.isArray(config.values) ? config.values : Array.isArray(second) ? second : undefined;
  const text = typeof config.text === 'string' ? config.text : typeof config.submit === 'function' ? '<submittable>' : String(first);
  return { text, values, name: typeof config.name === 'string' ? config.name : undefined, client };
}

/** Runs `fn` and returns every statement sent while it ran (nothing else may run meanwhile). */
export async function recordPg<T>(fn: () => Promise<T>): Promise<{ result: T; statements: PgStatement[] }> {
  if (!installed) throw new Error('installPgObserver() first');
  if (recorder !== null) throw new Error('recordPg does not nest');
  const statements: PgStatement[] = [];
  recorder = (statement) => statements.push(statement);
  try {
    const result = await fn();
    return { result, statements };
  } finally {
    recorder = null;
  }
}
