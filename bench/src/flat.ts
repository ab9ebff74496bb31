/**
 * Flat with data: every listing at the smallest and the biggest table size of
 * `config.flatRows` (10k and 1M rows by default), timed call by call in turns, so that a
 * listing that reads or sorts more than its page shows as growing with the table. Target: the
 * big table's p50 within 2× of the small one's. And the generic-plan trap: a prefix pattern
 * timed before and after `config.flatWholeTablePatterns` whole-table patterns on the same
 * connection (a prepared statement that shares its plan with them would scan the table).
 */
import { config } from './config.ts';
import { PREFIX_PATTERN, PROCESS_NAME, SNAPSHOT_PREFIX, paddedKey, type DataKind, type PostgresData } from './data-postgres.ts';
import { check, failedTable, ms, sizeLabel, timeTurns, type Timing } from './sections.ts';
import type { SectionRow, SectionTable } from './types.ts';

export const FLAT_TARGET = 2;
const PAGE = 100;
/** Matches no key, and starts with a wildcard: a pattern that reads the whole table. */
const WHOLE_TABLE_PATTERN = '*:nothing-ends-like-this';

interface Listing {
  kind: DataKind;
  label: string;
  /** One call of the listing on the table of `rows` rows. */
  call(data: PostgresData, rows: number): Promise<() => Promise<unknown>>;
  /** Reads every row by design: shown for comparison, without a target. */
  wholeTable?: boolean;
}

const listings: Listing[] = [
  {
    kind: 'snapshots',
    label: `snapshots list({ limit: ${PAGE} }): first page`,
    call: async (data, rows) => {
      const { store } = await data.table('snapshots', rows);
      return () => store.list({ limit: PAGE });
    },
  },
  {
    kind: 'snapshots',
    label: `snapshots listPage({ limit: ${PAGE}, cursor }): a page in the middle`,
    call: async (data, rows) => {
      const { store, table } = await data.table('snapshots', rows);
      const cursor = await data.snapshotCursor(table, Math.floor(rows / 2));
      return () => store.listPage({ limit: PAGE, cursor });
    },
  },
  {
    kind: 'snapshots',
    label: `snapshots list({ prefix: '${SNAPSHOT_PREFIX}', limit: ${PAGE} })`,
    call: async (data, rows) => {
      const { store } = await data.table('snapshots', rows);
      return () => store.list({ prefix: SNAPSHOT_PREFIX, limit: PAGE });
    },
  },
  {
    kind: 'kv',
    label: `kv keys('${PREFIX_PATTERN}')`,
    call: async (data, rows) => {
      const { store } = await data.table('kv', rows);
      return () => store.keys(PREFIX_PATTERN);
    },
  },
  {
    kind: 'kv',
    label: `kv entries('${PREFIX_PATTERN}')`,
    call: async (data, rows) => {
      const { store } = await data.table('kv', rows);
      return () => store.entries(PREFIX_PATTERN);
    },
  },
  {
    kind: 'kv',
    label: `kv scan('*') first page of ${PAGE}`,
    call: async (data, rows) => {
      const { store } = await data.table('kv', rows);
      return async () => {
        let n = 0;
        for await (const _key of store.scan('*', { pageSize: PAGE })) if (++n === PAGE) break;
      };
    },
  },
  {
    kind: 'kv',
    label: `kv keys('${WHOLE_TABLE_PATTERN}')`,
    wholeTable: true,
    call: async (data, rows) => {
      const { store } = await data.table('kv', rows);
      return () => store.keys(WHOLE_TABLE_PATTERN);
    },
  },
  {
    kind: 'cache',
    label: `cache keys('${PREFIX_PATTERN}')`,
    call: async (data, rows) => {
      const { store } = await data.table('cache', rows);
      return () => store.keys(PREFIX_PATTERN);
    },
  },
  {
    kind: 'process',
    label: `process list({ limit: ${PAGE} }): first page`,
    call: async (data, rows) => {
      const { store } = await data.table('process', rows);
      return () => store.listItems({ process: PROCESS_NAME, limit: PAGE });
    },
  },
  {
    kind: 'process',
    label: `process list({ after, limit: ${PAGE} }): a page in the middle`,
    call: async (data, rows) => {
      const { store } = await data.table('process', rows);
      const after = paddedKey(Math.floor(rows / 2), 'item:');
      return () => store.listItems({ process: PROCESS_NAME, after, limit: PAGE });
    },
  },
  {
    kind: 'process',
    label: `process list({ state: 'shipped', limit: ${PAGE} })`,
    call: async (data, rows) => {
      const { store } = await data.table('process', rows);
      return () => store.listItems({ process: PROCESS_NAME, state: 'shipped', limit: PAGE });
    },
  },
];

const FLAT_HEADER = ['listing', 'small p50 ms', 'big p50 ms', 'big p99 ms', 'big÷small'];

function flatRow(label: string, small: Timing, big: Timing, wholeTable: boolean, sizes: string): SectionRow {
  const ratio = big.p50 / small.p50;
  const cells = [label, ms(small.p50), ms(big.p50), ms(big.p99), `${ratio.toFixed(2)}x`];
  const data = { small, big, ratio };
  if (wholeTable) return { cells, note: 'no target: a pattern that starts with a wildcard reads every row', data };
  return { cells, check: check(`${label}: ${sizes} p50`, `<= ${FLAT_TARGET.toFixed(2)}x`, `${ratio.toFixed(2)}x`, ratio <= FLAT_TARGET), data };
}

/** The listings at both sizes; each kind's tables are dropped once measured, except the key-value ones (the memory section reads them). */
export async function runFlat(data: PostgresData, log: (line: string) => void): Promise<SectionTable[]> {
  const small = config.flatRows[0]!;
  const big = config.flatRows.at(-1)!;
  const sizes = `${sizeLabel(big)} vs ${sizeLabel(small)}`;
  const table: SectionTable = {
    id: 'flat',
    title: `listings by table size: ${sizeLabel(small)} vs ${sizeLabel(big)} rows (p50 of ${config.flatCalls} calls each, in turns; target big ≤ ${FLAT_TARGET}× small)`,
    header: FLAT_HEADER,
    align: ['l', 'r', 'r', 'r', 'r'],
    rows: [],
    notes: [],
  };
  const tables: SectionTable[] = [table];
  try {
    const built: string[] = [];
    for (const kind of ['snapshots', 'kv', 'cache', 'process'] as const) {
      for (const rows of [small, big]) {
        const t = await data.table(kind, rows);
        built.push(`${t.table} ${(t.buildMs / 1000).toFixed(1)} s`);
      }
      for (const listing of listings.filter((l) => l.kind === kind)) {
        const calls = [await listing.call(data, small), await listing.call(data, big)];
        const [a, b] = await timeTurns(calls, listing.wholeTable ? Math.min(5, config.flatCalls) : config.flatCalls, listing.wholeTable ? 1 : 8);
        table.rows.push(flatRow(listing.label, a!, b!, listing.wholeTable === true, sizes));
        log(`  flat ${listing.label}: ${ms(a!.p50)} → ${ms(b!.p50)} ms`);
      }
      if (kind === 'kv') tables.push(await genericPlan(data, big));
      if (kind !== 'kv') await data.drop(kind);
    }
    table.notes.push(`tables built in the server (INSERT … SELECT generate_series, unlogged): ${built.join(', ')}`);
  } catch (error) {
    tables.push(failedTable('flat', 'listings by table size', error));
  }
  return tables;
}

/**
 * The prefix pattern on the big table, before and after whole-table patterns on the same
 * connection (the stores here run on a pool of one connection).
 */
async function genericPlan(data: PostgresData, rows: number): Promise<SectionTable> {
  const { store } = await data.table('kv', rows);
  const prefix = () => store.keys(PREFIX_PATTERN);
  const [before] = await timeTurns([prefix], config.flatCalls);
  const started = performance.now();
  for (let i = 0; i < config.flatWholeTablePatterns; i++) await store.keys(WHOLE_TABLE_PATTERN);
  const wholeMs = (performance.now() - started) / config.flatWholeTablePatterns;
  const [after] = await timeTurns([prefix], config.flatCalls, 0);
  const ratio = after!.p50 / before!.p50;
  const label = `kv keys('${PREFIX_PATTERN}') at ${sizeLabel(rows)}`;
  return {
    id: 'generic-plan',
    title: `a prefix pattern before and after ${config.flatWholeTablePatterns} whole-table patterns on the same connection (target after ≤ ${FLAT_TARGET}× before)`,
    header: ['listing', 'before p50 ms', 'after p50 ms', 'after p99 ms', 'after÷before'],
    align: ['l', 'r', 'r', 'r', 'r'],
    rows: [
      {
        cells: [label, ms(before!.p50), ms(after!.p50), ms(after!.p99), `${ratio.toFixed(2)}x`],
        check: check(`${label} after whole-table patterns`, `<= ${FLAT_TARGET.toFixed(2)}x`, `${ratio.toFixed(2)}x`, ratio <= FLAT_TARGET),
        data: { before, after, wholeTablePatternMs: wholeMs },
      },
    ],
    notes: [`each whole-table pattern ('${WHOLE_TABLE_PATTERN}') took ${ms(wholeMs)} ms`],
  };
}
