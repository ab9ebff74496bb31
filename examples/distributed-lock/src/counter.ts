import type pg from 'pg';

/**
 * The shared record: a counter, and the highest fencing token any write carried. A write is
 * accepted only with a fence higher than that, so a process that lost its lock (and so holds
 * an old fence) can never overwrite what a later holder wrote.
 */
export async function createCounterTable(pool: pg.Pool): Promise<void> {
  await pool.query(`
    CREATE TABLE IF NOT EXISTS lock_demo_counters (
      id         text PRIMARY KEY,
      value      integer NOT NULL,
      last_fence bigint NOT NULL
    )`);
}

export async function resetCounter(pool: pg.Pool, id: string): Promise<void> {
  await pool.query(
    `INSERT INTO lock_demo_counters (id, value, last_fence) VALUES ($1, 0, 0)
     ON CONFLICT (id) DO UPDATE SET value = 0, last_fence = 0`,
    [id],
  );
}

export async function readCounter(pool: pg.Pool, id: string): Promise<{ value: number; lastFence: number }> {
  const { rows } = await pool.query<{ value: number; last_fence: string }>(
    'SELECT value, last_fence FROM lock_demo_counters WHERE id = $1',
    [id],
  );
  if (rows.length === 0) throw new Error(`counter ${id} does not exist`);
  return { value: rows[0]!.value, lastFence: Number(rows[0]!.last_fence) };
}

/** The guarded write. False when the fence is stale: the row is left as it was. */
export async function writeCounter(pool: pg.Pool, id: string, value: number, fence: number): Promise<boolean> {
  const result = await pool.query(
    'UPDATE lock_demo_counters SET value = $2, last_fence = $3 WHERE id = $1 AND last_fence < $3',
    [id, value, fence],
  );
  return result.rowCount === 1;
}
