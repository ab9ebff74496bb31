import type pg from 'pg';
import { loadPeer } from '../peers.js';

/** The tables of stowage's Postgres stores, by kind (the defaults of `@stowage/postgres`, or the user's names). */
export type Tables = Record<string, string>;

/**
 * One connection of the user's URL, which every view reads through. Each read runs in its own
 * `BEGIN READ ONLY` transaction: the server refuses any write, and nothing is left on a
 * pooled server connection (a session `SET` would outlive us behind PgBouncer).
 */
export class PgSession {
  private constructor(
    readonly client: pg.Client,
    readonly tables: Tables,
  ) {}

  static async open(url: string, options: { schema?: string; tables?: Record<string, string> }): Promise<PgSession> {
    const { default: driver } = await loadPeer<{ default: typeof pg }>('pg');
    const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
    const tables: Tables = {};
    for (const [kind, name] of Object.entries({ ...adapter.DEFAULT_TABLE_NAMES, ...options.tables })) {
      tables[kind] = new adapter.TableName(name, options.schema).sql;
    }
    const client = new driver.Client({ connectionString: url, application_name: 'stowage-cli', connectionTimeoutMillis: 10_000 });
    // A server that closes the connection emits 'error' on the client: the pending query rejects with it.
    client.on('error', () => undefined);
    await client.connect();
    return new PgSession(client, tables);
  }

  #queue: Promise<unknown> = Promise.resolve();

  /** `text` with `values` in a read-only transaction; calls made together (the web page's views) run one after another. */
  read<T>(text: string, values: unknown[] = []): Promise<T[]> {
    const run = () => this.#read<T>(text, values);
    const next = this.#queue.then(run, run);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #read<T>(text: string, values: unknown[]): Promise<T[]> {
    await this.client.query('BEGIN READ ONLY');
    try {
      const { rows } = await this.client.query(text, values);
      await this.client.query('COMMIT');
      return rows as T[];
    } catch (error) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }

  /** Which of `tables` (quoted names) exist, as tables. */
  async existing(names: string[]): Promise<Set<string>> {
    const rows = await this.read<{ name: string }>(
      `SELECT name FROM unnest($1::text[]) AS name JOIN pg_class c ON c.oid = to_regclass(name) AND c.relkind IN ('r', 'p')`,
      [names],
    );
    return new Set(rows.map((row) => row.name));
  }

  close(): Promise<void> {
    return this.client.end();
  }
}
