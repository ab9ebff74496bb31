import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startEmbeddedPostgres, type FoundBackend } from '../src/index.js';

// pglite-socket alone interleaves concurrent connections' Parse/Bind/Execute messages, so
// parameterised queries run with another connection's parameters or not at all.
let embedded: FoundBackend;
let pool: pg.Pool;

beforeAll(async () => {
  embedded = await startEmbeddedPostgres();
  pool = new pg.Pool({ connectionString: embedded.url, max: 8 });
});

afterAll(async () => {
  await pool.end();
  await embedded.stop();
});

it('keeps each connection’s parameterised queries intact under concurrency', async () => {
  await pool.query('create table batch_rows (id int primary key, body text)');
  const body = 'x'.repeat(1 << 20);
  const work: Promise<unknown>[] = [];
  for (let round = 0; round < 5; round++) {
    work.push(pool.query('insert into batch_rows values ($1, $2)', [round, body]));
    for (let i = 0; i < 20; i++) {
      work.push(pool.query('select $1::int + $2::int as sum', [i, round]).then((r) => expect(r.rows[0].sum).toBe(i + round)));
    }
  }
  await Promise.all(work);
  const { rows } = await pool.query('select count(*)::int as n, min(length(body)) as len from batch_rows');
  expect(rows[0]).toEqual({ n: 5, len: body.length });
});

it('keeps transactions on their own connection while others query', async () => {
  await pool.query('create table batch_counter (id int primary key, n int)');
  await pool.query('insert into batch_counter values (1, 0)');
  const increment = async () => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      const { rows } = await client.query('select n from batch_counter where id = $1 for update', [1]);
      await client.query('update batch_counter set n = $1 where id = $2', [rows[0].n + 1, 1]);
      await client.query('commit');
    } finally {
      client.release();
    }
  };
  const reads = Array.from({ length: 50 }, (_, i) =>
    pool.query('select $1::text as echo', [`r${i}`]).then((r) => expect(r.rows[0].echo).toBe(`r${i}`)),
  );
  await Promise.all([...Array.from({ length: 50 }, increment), ...reads]);
  const { rows } = await pool.query('select n from batch_counter');
  expect(rows[0].n).toBe(50);
});
