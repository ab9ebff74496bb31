import type { OpenOptions } from '../model.js';
import type { AdoptionPlanItem } from '../model.js';
import { loadPeer } from '../peers.js';
import type { PgSession } from './connection.js';
import { readTables, type TableState } from './layout.js';

/*
 * `stowage adopt` on PostgreSQL. The plan restates, for each awaitly-postgres table found, the
 * steps of @stowage/postgres's in-place upgrade (its README, "Existing tables") that this table
 * still needs; `--apply` runs that upgrade itself, by starting the store on the table
 * (`ready()`), so it has the same guarantees as the automatic adoption: idempotent steps under
 * an advisory lock, CONCURRENTLY-built indexes, a bounded lock_timeout.
 */

/** Table blocks per `updated_at` batch of the upgrade (8 KiB each). */
const BLOCKS_PER_BATCH = 256;

export async function adoptionPlan(session: PgSession): Promise<AdoptionPlanItem[]> {
  const states = await readTables(session, { kv: session.tables.kv!, snapshots: session.tables.snapshots!, workflowLocks: session.tables.workflowLocks! });
  return states.filter((state) => state.verdict !== 'stowage').map(planOf);
}

function planOf(state: TableState): AdoptionPlanItem {
  if (state.verdict === 'refused') return { name: state.name, layout: 'unknown', rows: state.rows, changes: [], refused: state.reason };
  const has = (name: string) => state.columns.has(name);
  const index = (suffix: string) => state.indexes.some((name) => name.endsWith(`_${suffix}`));
  const batches = Math.max(1, Math.ceil(state.pages / BLOCKS_PER_BATCH));
  const changes: string[] = [];
  const kv = state.kind === 'kv';
  if (!kv && !has('prefix')) changes.push(`add column prefix TEXT COLLATE "C" NOT NULL DEFAULT '' (catalog change, no rewrite)`);
  if (!has('version')) changes.push('add column version BIGINT NOT NULL DEFAULT 1, and the sequence <table>_version_seq handing out 2 and up (catalog change)');
  if (kv && !has('updated_at')) changes.push(`add column updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()) (catalog change)`);
  if (kv && state.columns.get('expires_at')?.type === 'timestamp without time zone') {
    changes.push('expires_at TIMESTAMP -> TIMESTAMPTZ in the session time zone (no rewrite when it is UTC; otherwise a rewrite under an exclusive lock)');
  }
  for (const name of kv ? ['value', 'updated_at'] : ['snapshot', 'updated_at']) {
    if (has(name) && !state.columns.get(name)!.notNull) changes.push(`${name} NOT NULL (CHECK … NOT VALID, validated without blocking writes)`);
  }
  if (has('updated_at')) changes.push(`updated_at to milliseconds, NULL to now(): about ${state.rows} rows in ${batches} batch(es) of ${BLOCKS_PER_BATCH} blocks`);
  const key = kv ? 'key' : state.columns.has('id') ? 'id' : 'snapshot_id';
  const collation = state.columns.get(key)?.collation;
  const byteOrder = collation === 'C' || collation === 'POSIX' || (collation === 'default' && state.byteOrderDefault);
  if (key === 'id') changes.push('rename id to snapshot_id, so that awaitly-postgres code still running fails instead of reaching every prefix (catalog change)');
  if (!kv && !['prefix,id', 'prefix,snapshot_id'].includes(state.primaryKey.join(','))) {
    changes.push('primary key (prefix, snapshot_id), snapshot_id COLLATE "C": unique index built CONCURRENTLY, then attached');
  } else if (!byteOrder) changes.push(`${kv ? key : 'snapshot_id'} COLLATE "C" (byte order for key ranges): unique index built CONCURRENTLY, then attached`);
  const wanted = kv ? ['expires_at_idx', 'recent_idx'] : ['list_idx'];
  for (const suffix of wanted) if (!index(suffix)) changes.push(`index <table>_${suffix} built CONCURRENTLY`);
  return {
    name: state.name,
    layout: kv ? "awaitly-postgres's key-value table" : "awaitly-postgres's snapshot table",
    rows: state.rows,
    changes,
  };
}

export async function adopt(url: string, options: OpenOptions, plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void> {
  const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const db = adapter.connect({ url, schema: options.schema, applicationName: 'stowage-cli' });
  try {
    for (const [index, item] of plan.entries()) {
      progress(`[${index + 1}/${plan.length}] adopting ${item.name} (about ${item.rows} rows)…`);
      const table = tableOf(item.name);
      const store = item.layout.includes('key-value') ? db.kv({ table }) : db.snapshots({ table });
      await store.ready();
      progress(`[${index + 1}/${plan.length}] ${item.name} done`);
    }
  } finally {
    await db.close();
  }
}

/** `"schema"."table"` or `"table"` -> `table` (the schema comes from --schema). */
function tableOf(quoted: string): string {
  return quoted.split('.').at(-1)!.replace(/^"|"$/g, '');
}
