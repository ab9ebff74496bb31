/**
 * Batches: two callers write (`setMany`) or delete (`deleteMany`) the same keys at once, one in
 * ascending and one in descending order. A backend that locks rows in the order its caller gave
 * them deadlocks (PostgreSQL cancels one of the two with 40P01); stowage takes row locks in key
 * order, so neither waits for a row the other will only lock later.
 *
 * Timing alone rarely makes two short statements meet inside the database, so each pair is
 * gated: a blocker transaction holds the row of a middle key while both batches are sent, and
 * commits once both are seen waiting for a lock in `pg_stat_activity`. Each batch has then
 * locked whatever it locks before that key, and a caller-order implementation deadlocks in every
 * pair. The detector is shown to work by gating the same pairs over raw caller-order SQL, which
 * must deadlock. PGlite is one server session (statements never wait for each other there),
 * so its pairs run ungated.
 *
 * Proves: deadlocks, raw errors and any other errors = 0 over `pairs` pairs.
 */
import pg from 'pg';
import { isStowageError, type KeyValueStore } from '@stowage/core';
import type { Budget } from '../config.ts';
import { describeError, type BackendReport } from '../report.ts';
import { POSTGRES_BACKENDS, type Backend } from '../backends/types.ts';
import { APPLICATION_NAME } from '../backends/pg-admin.ts';
import { formatMs, sleep } from '../util.ts';

const TABLE = 'reliability_batches';
/** How long a gate waits for both batches to be seen waiting: a liveness bound; a pair not seen is counted. */
const GATE_LIMIT_MS = 15_000;

interface PairOutcomes {
  pairs: number;
  gated: number;
  deadlocks: number;
  raw: number;
  other: number;
  details: string[];
}

/** Holds one row's lock in a transaction of its own, and watches for statements waiting on the table. */
class Gate {
  private readonly blocker: pg.Client;
  private readonly observer: pg.Client;
  private readonly table: string;

  private constructor(blocker: pg.Client, observer: pg.Client, table: string) {
    this.blocker = blocker;
    this.observer = observer;
    this.table = table;
  }

  static async open(url: string, schema: string): Promise<Gate> {
    const connect = async () => {
      const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-gate` });
      await client.connect();
      return client;
    };
    return new Gate(await connect(), await connect(), `"${schema}"."${TABLE}"`);
  }

  async hold(key: string): Promise<void> {
    await this.blocker.query('BEGIN');
    await this.blocker.query(`SELECT key FROM ${this.table} WHERE key = $1 FOR UPDATE`, [key]);
  }

  /** True once `count` statements on the table wait for a lock (bounded by {@link GATE_LIMIT_MS}). */
  async waitFor(count: number): Promise<boolean> {
    const deadline = performance.now() + GATE_LIMIT_MS;
    while (performance.now() < deadline) {
      const { rows } = await this.observer.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_activity
          WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND position($1 in query) > 0`,
        [TABLE],
      );
      if (Number(rows[0]!.n) >= count) return true;
      await sleep(5);
    }
    return false;
  }

  async open(): Promise<void> {
    await this.blocker.query('COMMIT');
  }

  async close(): Promise<void> {
    await this.blocker.end();
    await this.observer.end();
  }
}

type BatchPair = (pair: number, ascending: string[], descending: string[]) => [Promise<unknown>, Promise<unknown>];

/** Runs `pairs` pairs (even: writes, odd: deletes), each gated on the middle key when `gate` is given. */
async function runPairs(
  pairs: number,
  keys: string[],
  seed: () => Promise<void>,
  batch: { write: BatchPair; remove: BatchPair },
  gate: Gate | null,
): Promise<PairOutcomes> {
  const outcomes: PairOutcomes = { pairs: 0, gated: 0, deadlocks: 0, raw: 0, other: 0, details: [] };
  const descending = [...keys].reverse();
  const middle = keys[Math.floor(keys.length / 2)]!;
  await seed();
  for (let pair = 0; pair < pairs; pair++) {
    const remove = pair % 2 === 1;
    if (gate) await gate.hold(middle);
    const both = (remove ? batch.remove : batch.write)(pair, keys, descending);
    const settled = Promise.allSettled(both);
    if (gate) {
      if (await gate.waitFor(2)) outcomes.gated += 1;
      await gate.open();
    }
    outcomes.pairs += 1;
    for (const result of await settled) {
      if (result.status === 'fulfilled') continue;
      const error = result.reason;
      const state = (error as { code?: unknown; cause?: { code?: unknown } }).cause?.code ?? (error as { code?: unknown }).code;
      if (state === '40P01') outcomes.deadlocks += 1;
      else if (isStowageError(error)) outcomes.other += 1;
      else outcomes.raw += 1;
      if (outcomes.details.length < 5) outcomes.details.push(`pair ${pair} (${remove ? 'deleteMany' : 'setMany'}): ${describeError(error)}`);
    }
    if (remove) await seed();
  }
  return outcomes;
}

/** The same pairs over raw SQL that locks rows in the caller's order: what the gate must turn into deadlocks. */
async function callerOrderPairs(url: string, schema: string, keys: string[], gate: Gate): Promise<PairOutcomes> {
  const table = `"${schema}"."${TABLE}"`;
  const clients = [new pg.Client({ connectionString: url }), new pg.Client({ connectionString: url })] as const;
  await Promise.all(clients.map((client) => client.connect()));
  try {
    const write = (client: pg.Client, list: string[], value: string) =>
      client.query(
        `INSERT INTO ${table} (key, value, version) SELECT k, $2, 0 FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n
         ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
        [list, value],
      );
    const remove = (client: pg.Client, list: string[]) =>
      client.query(
        `WITH locked AS (SELECT t.key FROM ${table} t JOIN unnest($1::text[]) WITH ORDINALITY AS u(k, n) ON t.key = u.k ORDER BY u.n FOR UPDATE OF t)
         DELETE FROM ${table} t USING locked WHERE t.key = locked.key`,
        [list],
      );
    return await runPairs(
      2,
      keys,
      async () => void (await write(clients[0], keys, 'seed')),
      {
        write: (pair, asc, desc) => [write(clients[0], asc, `a${pair}`), write(clients[1], desc, `b${pair}`)],
        remove: (_pair, asc, desc) => [remove(clients[0], asc), remove(clients[1], desc)],
      },
      gate,
    );
  } finally {
    await Promise.all(clients.map((client) => client.end()));
  }
}

export async function batches(backend: Backend, report: BackendReport, budget: Budget['batches']): Promise<void> {
  const check = 'batches';
  if (!POSTGRES_BACKENDS.includes(backend.target.name)) {
    report.notApplicable(check, 'row-lock order: Postgres backends only');
    return;
  }
  const started = performance.now();
  const keys = Array.from({ length: budget.keys }, (_, i) => `batch/${String(i).padStart(3, '0')}`);
  const ascending: KeyValueStore = await backend.kv({ table: TABLE });
  const descending: KeyValueStore = await backend.kv({ table: TABLE });
  const gated = backend.target.name !== 'pglite';
  const gate = gated ? await Gate.open(backend.target.url!, backend.target.namespace) : null;
  try {
    const seed = () => ascending.setMany(keys.map((key) => ({ key, value: 'seed' })));
    const stowage = await runPairs(
      budget.pairs,
      keys,
      seed,
      {
        write: (pair, asc, desc) => [
          ascending.setMany(asc.map((key) => ({ key, value: `a${pair}` }))),
          descending.setMany(desc.map((key) => ({ key, value: `b${pair}` }))),
        ],
        remove: (_pair, asc, desc) => [ascending.deleteMany(asc), descending.deleteMany(desc)],
      },
      gate,
    );
    const how = gated ? 'gated' : 'ungated: PGlite is one session';
    report.expect(check, `opposite-order setMany/deleteMany pairs (${budget.keys} keys, ${how}): deadlocks`, stowage.deadlocks, '= 0', stowage.deadlocks === 0);
    report.expect(check, 'raw errors', stowage.raw, '= 0', stowage.raw === 0);
    report.expect(check, 'other errors', stowage.other, '= 0', stowage.other === 0);
    if (gate) {
      report.expect(check, 'pairs where both batches were seen waiting inside the database', `${stowage.gated} of ${stowage.pairs}`, 'all', stowage.gated === stowage.pairs);
    }
    for (const detail of stowage.details) report.note(`batches: ${detail}`);
    if (gate && backend.target.name === 'postgres') {
      const flawed = await callerOrderPairs(backend.target.url!, backend.target.namespace, keys, gate);
      report.expect(check, 'detector: raw SQL locking in caller order, gated the same way → deadlocks', flawed.deadlocks, '≥ 1', flawed.deadlocks >= 1);
    }
  } finally {
    await ascending.close();
    await descending.close();
    await gate?.close();
  }
  report.info(check, 'duration', formatMs(performance.now() - started));
}
