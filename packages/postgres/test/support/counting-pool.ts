import type pg from 'pg';
import type { PostgresPool, PostgresPoolClient, PostgresStatement } from '../../src/index.js';

/**
 * A `pg.Pool` seen through a counter: every statement sent through it (by `pool.query` or by a
 * checked-out client) adds one. With pg's extended protocol one statement is one round trip.
 */
export class CountingPool implements PostgresPool {
  statements: string[] = [];
  /** Statements the server has answered (a statement counts in `statements` when sent). */
  answered = 0;
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
    this.answered = 0;
  }

  query(statement: string | PostgresStatement, values?: unknown[]) {
    this.statements.push(typeof statement === 'string' ? statement : statement.text);
    return this.#answering(this.#pool.query(statement, values));
  }

  #answering<T>(result: Promise<T>): Promise<T> {
    void result.then(
      () => this.answered++,
      () => this.answered++,
    );
    return result;
  }

  async connect(): Promise<PostgresPoolClient> {
    const client = await this.#pool.connect();
    return {
      query: (statement: string | PostgresStatement, values?: unknown[]) => {
        this.statements.push(typeof statement === 'string' ? statement : statement.text);
        return this.#answering(client.query(statement, values));
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
