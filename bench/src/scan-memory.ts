/**
 * Memory and cleanup on the big key-value table:
 * - `scan()` of every key: the heap (after forced GC, every 20,000 keys) must stay within
 *   32 MB of where it started, since a scan holds one page at a time; `keys('*')`, which holds
 *   the whole result, is shown beside it without a target;
 * - `clearExpired()` of 100,000 expired rows among the big table's: its duration and the
 *   statements it sent (counted from the driver): batches of bounded size, not one DELETE.
 */
import type { PostgresData } from './data-postgres.ts';
import { recordPg } from './pg-observer.ts';
import { check, collectedHeap, failedTable, mib, sizeLabel } from './sections.ts';
import { config } from './config.ts';
import type { SectionTable } from './types.ts';

export const SCAN_HEAP_LIMIT = 32 * 1024 * 1024;
const SAMPLE_EVERY = 20_000;
const EXPIRED_ROWS = 100_000;
/** A batch bigger than this is not what "bounded" means here. */
const MAX_BATCH = 10_000;

async function scanTable(data: PostgresData, log: (line: string) => void): Promise<SectionTable> {
  const rows = config.flatRows.at(-1)!;
  const { store } = await data.table('kv', rows);
  const table: SectionTable = {
    id: 'memory',
    title: `heap while iterating the keys of a ${sizeLabel(rows)}-row table (sampled after forced GC; target: scan() peak growth ≤ ${mib(SCAN_HEAP_LIMIT)})`,
    header: ['what', 'keys', 'seconds', 'heap peak growth', 'rss growth'],
    align: ['l', 'r', 'r', 'r', 'r'],
    rows: [],
    notes: [],
  };

  const base = collectedHeap();
  const rssBase = process.memoryUsage().rss;
  let peak = base;
  let rssPeak = rssBase;
  let count = 0;
  const started = performance.now();
  for await (const _key of store.scan('*', { pageSize: 1000 })) {
    if (++count % SAMPLE_EVERY === 0) {
      peak = Math.max(peak, collectedHeap());
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    }
  }
  const scanSeconds = (performance.now() - started) / 1000;
  const growth = peak - base;
  table.rows.push({
    cells: ["scan('*', { pageSize: 1000 })", count.toLocaleString('en-US'), scanSeconds.toFixed(1), mib(growth), mib(rssPeak - rssBase)],
    check: check(`scan() of ${sizeLabel(rows)} keys: heap peak growth`, `<= ${mib(SCAN_HEAP_LIMIT)}`, mib(growth), growth <= SCAN_HEAP_LIMIT && count === rows),
    data: { keys: count, seconds: scanSeconds, heapGrowth: growth, rssGrowth: rssPeak - rssBase },
  });
  log(`  memory scan of ${count} keys: ${mib(growth)} heap growth`);

  const keysBase = collectedHeap();
  const keysRss = process.memoryUsage().rss;
  const keysStarted = performance.now();
  let all: string[] | null = await store.keys('*');
  const keysSeconds = (performance.now() - keysStarted) / 1000;
  const held = collectedHeap() - keysBase;
  const keysRssGrowth = process.memoryUsage().rss - keysRss;
  const keysCount = all.length;
  all = null;
  table.rows.push({
    cells: ["keys('*') (the whole result at once)", keysCount.toLocaleString('en-US'), keysSeconds.toFixed(1), mib(held), mib(keysRssGrowth)],
    note: 'no target: holds every key by design; shown for scale',
    data: { keys: keysCount, seconds: keysSeconds, heapGrowth: held, rssGrowth: keysRssGrowth },
  });
  return table;
}

async function clearExpiredTable(data: PostgresData, log: (line: string) => void): Promise<SectionTable> {
  const rows = config.flatRows.at(-1)!;
  const expired = Math.min(EXPIRED_ROWS, rows);
  const { store, table: name } = await data.table('kv', rows);
  await data.expireKeys(name, expired);
  const started = performance.now();
  const { result: removed, statements } = await recordPg(() => store.clearExpired());
  const seconds = (performance.now() - started) / 1000;
  const minStatements = Math.ceil(expired / MAX_BATCH);
  log(`  clearExpired: ${removed} rows, ${statements.length} statements, ${seconds.toFixed(2)} s`);
  return {
    id: 'clear-expired',
    title: `clearExpired() of ${expired.toLocaleString('en-US')} expired rows in a ${sizeLabel(rows)}-row key-value table (target: batches of at most ${MAX_BATCH.toLocaleString('en-US')} rows)`,
    header: ['what', 'rows removed', 'seconds', 'statements', 'rows per statement'],
    align: ['l', 'r', 'r', 'r', 'r'],
    rows: [
      {
        cells: ['kv clearExpired()', removed.toLocaleString('en-US'), seconds.toFixed(2), String(statements.length), Math.round(removed / Math.max(1, statements.length)).toLocaleString('en-US')],
        check: check(
          'clearExpired() batches',
          `all ${expired} rows, >= ${minStatements} statements`,
          `${removed} rows, ${statements.length} statements`,
          removed === expired && statements.length >= minStatements,
        ),
        data: { removed, seconds, statements: statements.map((s) => s.text.replace(/\s+/g, ' ').trim()) },
      },
    ],
    notes: [],
  };
}

/** Scan memory, then the expiry cleanup (which deletes rows), then the key-value tables go. */
export async function runScanMemory(data: PostgresData, log: (line: string) => void): Promise<SectionTable[]> {
  const tables: SectionTable[] = [];
  try {
    tables.push(await scanTable(data, log));
  } catch (error) {
    tables.push(failedTable('memory', 'heap while iterating keys', error));
  }
  try {
    tables.push(await clearExpiredTable(data, log));
  } catch (error) {
    tables.push(failedTable('clear-expired', 'clearExpired()', error));
  }
  await data.drop('kv').catch(() => undefined);
  return tables;
}
