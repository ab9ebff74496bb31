import pg from 'pg';

/**
 * The schema every table of the demo lives in (the stores' and the side-effect counters'): on a
 * database of yours (DATABASE_URL) the demo leaves nothing in `public`, and `pnpm demo` drops
 * the schema at the end when it created it.
 */
export const DEMO_SCHEMA = 'stowage_demo';
const TABLE = `${DEMO_SCHEMA}.checkout_side_effects`;

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
    await this.#pool.query(`CREATE SCHEMA IF NOT EXISTS ${DEMO_SCHEMA}`).catch(async (error: unknown) => {
      // Two demos starting at once: the loser of the race sees the schema the winner created.
      if ((error as { code?: string }).code !== '23505') throw error;
    });
    await this.#pool.query(`
      CREATE TABLE IF NOT EXISTS ${TABLE} (
        workflow_id text NOT NULL,
        step        text NOT NULL,
        calls       integer NOT NULL,
        PRIMARY KEY (workflow_id, step)
      )`);
  }

  async record(workflowId: string, step: string): Promise<void> {
    await this.#pool.query(
      `INSERT INTO ${TABLE} AS t (workflow_id, step, calls) VALUES ($1, $2, 1)
       ON CONFLICT (workflow_id, step) DO UPDATE SET calls = t.calls + 1`,
      [workflowId, step],
    );
  }

  /** How many times each step ran for this workflow id, e.g. `{ fetchUser: 1, createOrder: 1 }`. */
  async calls(workflowId: string): Promise<Record<string, number>> {
    const { rows } = await this.#pool.query<{ step: string; calls: number }>(
      `SELECT step, calls FROM ${TABLE} WHERE workflow_id = $1 ORDER BY step`,
      [workflowId],
    );
    return Object.fromEntries(rows.map((row) => [row.step, row.calls]));
  }

  /** Whether the demo schema exists (before a run on a database of the user's: drop it after only if not). */
  async schemaExists(): Promise<boolean> {
    const { rows } = await this.#pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [DEMO_SCHEMA]);
    return rows.length > 0;
  }

  async dropSchema(): Promise<void> {
    await this.#pool.query(`DROP SCHEMA IF EXISTS ${DEMO_SCHEMA} CASCADE`);
  }

  close(): Promise<void> {
    return this.#pool.end();
  }
}
