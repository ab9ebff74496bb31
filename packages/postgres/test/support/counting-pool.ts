import type pg from 'pg';
import type { PostgresPool, PostgresPoolClient, PostgresStatement } from '../../src/index.js';

/**
 * A `pg.Pool` seen through a counter: every statement sent through it (by `pool.query` or by a
 * checked-out client) adds one. With pg's extended protocol one statement is one round trip.
 */
export class CountingPool implements PostgresPool {
  statements: string[] = [];
  readonly #pool: pg.Pool;

  constructor(pool: pg.Pool) {
    this.#pool = pool;
  }

  get options(): object {
    return (this.#pool as unknown as { options: object }).options;
  }

  get count(): number {
    return this.statements.length;
  }

  reset(): void {
    this.statements = [];
  }

  query(statement: string | PostgresStatement, values?: unknown[]) {
    this.statements.push(typeof statement === 'string' ? statement : statement.text);
    return this.#pool.query(statement, values);
  }

  async connect(): Promise<PostgresPoolClient> {
    const client = await this.#pool.connect();
    return {
      query: (statement: string | PostgresStatement, values?: unknown[]) => {
        this.statements.push(typeof statement === 'string' ? statement : statement.text);
        return client.query(statement, values);
      },
      release: (error?: Error | boolean) => client.release(error),
      on: (event: 'error', listener: (error: Error) => void) => client.on(event, listener),
      removeListener: (event: 'error', listener: (error: Error) => void) => client.removeListener(event, listener),
    };
  }

  end(): Promise<void> {
    return this.#pool.end();
  }
}
