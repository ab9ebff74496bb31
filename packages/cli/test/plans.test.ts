import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { DEFAULT_TABLE_NAMES, TableName, connect } from '@stowage/postgres';
import { findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { encodeCursor } from '../src/model.js';
import { workflowsQuery } from '../src/postgres/inspect.js';
import { CLI, unique } from './support.js';

/*
 * Paging over a large table without reading it: the plan of a page of `inspect workflows`
 * deep into 100,000 snapshots reads the primary key from the cursor and stops after the page
 * (a plan, not a timing). Each page is fetched, printed and dropped, so memory holds one page:
 * `--all` lists every row with a heap too small to hold them all.
 */

describe('inspect workflows: a page costs a page', () => {
  let server: FoundBackend;
  let client: pg.Client;
  const schema = unique('cli_plan');
  const tables = Object.fromEntries(Object.entries(DEFAULT_TABLE_NAMES).map(([kind, name]) => [kind, new TableName(name, schema).sql]));

  beforeAll(async () => {
    server = (await findPostgresServer())!;
    const db = connect({ url: server.url, schema });
    await db.snapshots({ lock: true }).ready();
    await db.close();
    client = new pg.Client(server.url);
    await client.connect();
    await client.query(
      `INSERT INTO ${tables.snapshots} (prefix, id, snapshot, version)
       SELECT 'p' || (g % 10), 'wf-' || lpad(g::text, 7, '0'), '{"formatVersion":1,"steps":{},"execution":{"status":"running","lastUpdated":"x"}}', g
       FROM generate_series(1, 100000) AS g`,
    );
    await client.query(`ANALYZE ${tables.snapshots}`);
  });

  afterAll(async () => {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  it('reads the primary key from the cursor and stops after limit + 1 rows', async () => {
    const { text, values } = workflowsQuery(tables, true, { limit: 100, cursor: encodeCursor(['p5', 'wf-0050005']) });
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
    const plan = rows[0]['QUERY PLAN'][0].Plan;
    expect(plan['Node Type']).toBe('Limit');
    expect(plan['Actual Rows']).toBe(101);
    // The table is read once, by an index scan of the primary key from the cursor, for 101 rows (no sort of the table).
    const scans: Array<{ 'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string; 'Actual Rows': number }> = [];
    const walk = (node: { Plans?: unknown[] } & Record<string, unknown>) => {
      if (node['Relation Name'] === 'awaitly_snapshots') scans.push(node as never);
      for (const child of node.Plans ?? []) walk(child as never);
    };
    walk(plan);
    expect(scans).toEqual([expect.objectContaining({ 'Node Type': 'Index Scan', 'Index Name': 'awaitly_snapshots_pkey', 'Actual Rows': 101 })]);
  });

  it('--all streams every row, page by page, in a 16 MB heap (one query for all 100,000 rows runs out of it)', async () => {
    const child = spawn(
      process.execPath,
      ['--max-old-space-size=16', CLI, 'inspect', 'workflows', '--url', server.url, '--schema', schema, '--all', '--json', '--limit', '2000'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let rows = 0;
    let last = '';
    for await (const line of createInterface({ input: child.stdout })) {
      const { namespace, id } = JSON.parse(line) as { namespace: string; id: string };
      expect(`${namespace} ${id}` > last).toBe(true); // every row once, in key order
      last = `${namespace} ${id}`;
      rows++;
    }
    const code = await new Promise((resolve) => (child.exitCode === null ? child.once('exit', resolve) : resolve(child.exitCode)));
    expect(code).toBe(0);
    expect(rows).toBe(100_000);
  });
});
