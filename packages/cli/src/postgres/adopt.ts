import type { OpenOptions } from '../model.js';
import type { AdoptionPlanItem } from '../model.js';
import { loadPeer } from '../peers.js';
import type { PgSession } from './connection.js';
import { readTables, storeTables, type TableRef } from './layout.js';

/*
 * `stowage adopt` on PostgreSQL. The plan is @stowage/postgres's own (`planTableAdoption()`):
 * for each awaitly-postgres table found, the steps of its in-place upgrade that this table
 * still needs (its README, "Existing tables"); for each of go-go-scope's own tables, what
 * goGoScopePersistence's conversion changes. `--apply` runs that adoption itself, by starting
 * the store on the table (`ready()`), so it has the same guarantees as the automatic adoption:
 * idempotent steps under an advisory lock, CONCURRENTLY-built indexes (awaitly's tables), one
 * transaction per table (go-go-scope's), a bounded lock_timeout.
 */

export async function adoptionPlan(session: PgSession, options: OpenOptions): Promise<AdoptionPlanItem[]> {
  const plan: AdoptionPlanItem[] = [];
  for (const table of await readTables(session, await storeTables(session, options.schema))) {
    const { name, rows, plan: adoption } = table;
    if (adoption.verdict === 'refused') plan.push({ name, layout: 'unknown', rows, changes: [], refused: adoption.reason });
    else if (adoption.verdict === 'awaitly') plan.push({ name, layout: adoption.layout, rows, changes: adoption.changes });
    else if (adoption.verdict === 'go-go-scope') {
      plan.push({
        name,
        layout: `${adoption.layout}, adopted in place by goGoScopePersistence`,
        rows,
        changes: [...adoption.changes, `--apply converts it with keyPrefix ${JSON.stringify(options.keyPrefix ?? '')} (--key-prefix) and idempotencyKeyPrefix ""`],
      });
    }
  }
  return plan;
}

export async function adopt(session: PgSession, url: string, options: OpenOptions, plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void> {
  const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const tables = new Map((await storeTables(session, options.schema)).map((table) => [table.name, table]));
  const db = adapter.connect({ url, schema: options.schema, applicationName: 'stowage-cli' });
  // goGoScopePersistence on go-go-scope's table names: its stores convert go-go-scope's tables when they start.
  const persistence = adapter.goGoScopePersistence({ url, schema: options.schema, applicationName: 'stowage-cli' }, { keyPrefix: options.keyPrefix ?? '' });
  try {
    for (const [index, item] of plan.entries()) {
      progress(`[${index + 1}/${plan.length}] adopting ${item.name} (about ${item.rows} rows)…`);
      const table: TableRef = tables.get(item.name)!;
      const store = table.goGoScope
        ? persistence.stores[table.slot as keyof typeof persistence.stores]
        : table.kind === 'kv'
          ? db.kv({ table: tableOf(item.name) })
          : db.snapshots({ table: tableOf(item.name) });
      await (store as { ready(): Promise<unknown> }).ready();
      progress(`[${index + 1}/${plan.length}] ${item.name} done`);
    }
  } finally {
    await Promise.all([db.close(), persistence.close()]);
  }
}

/** `"schema"."table"` or `"table"` -> `table` (the schema comes from --schema). */
function tableOf(quoted: string): string {
  return quoted.split('.').at(-1)!.replace(/^"|"$/g, '');
}
