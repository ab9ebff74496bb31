import pg from 'pg';

/**
 * Every call of a step's function leaves a row here, in the same database. This is how the
 * demo proves, across processes and crashes, how many times each step really ran.
 */
export class SideEffects {
  readonly #pool: pg.Pool;

  constructor(url: string) {
    this.#pool = new pg.Pool({ connectionString: url, max: 2 });
  }

  async createTable(): Promise<void> {
    await this.#pool.query(`
      CREATE TABLE IF NOT EXISTS checkout_side_effects (
        workflow_id text NOT NULL,
        step        text NOT NULL,
        calls       integer NOT NULL,
        PRIMARY KEY (workflow_id, step)
      )`);
  }

  async record(workflowId: string, step: string): Promise<void> {
    await this.#pool.query(
      `INSERT INTO checkout_side_effects (workflow_id, step, calls) VALUES ($1, $2, 1)
       ON CONFLICT (workflow_id, step) DO UPDATE SET calls = checkout_side_effects.calls + 1`,
      [workflowId, step],
    );
  }

  /** How many times each step ran for this workflow id, e.g. `{ fetchUser: 1, createOrder: 1 }`. */
  async calls(workflowId: string): Promise<Record<string, number>> {
    const { rows } = await this.#pool.query<{ step: string; calls: number }>(
      'SELECT step, calls FROM checkout_side_effects WHERE workflow_id = $1 ORDER BY step',
      [workflowId],
    );
    return Object.fromEntries(rows.map((row) => [row.step, row.calls]));
  }

  close(): Promise<void> {
    return this.#pool.end();
  }
}
