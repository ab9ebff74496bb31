import { clearExpiredBatchSql, epochMs, msInterval } from '../sql.js';

/** An item row as {@link processStatements} select it. */
export interface ItemRow {
  id: string;
  state: string;
  data: string;
  version: string | number;
  attempts: number;
  last_error: string | null;
  lease_owner: string | null;
  lease_until: number | null;
  created_at: number;
  updated_at: number;
}

/**
 * The statements of a process backend on its two tables, built once (see
 * `keyValueStatements` in kv.ts). `$1` is the process, `$2` the item id (stored form)
 * wherever they appear.
 */
export function processStatements(items: string, transitions: string) {
  const itemColumns = `id, state, data::text AS data, version, attempts, last_error, lease_owner,
    ${epochMs('lease_until')} AS lease_until, ${epochMs('created_at')} AS created_at, ${epochMs('updated_at')} AS updated_at`;
  return {
    // Insert, log and notify ($5 channel, $6 payload); or, when the id exists, the existing row.
    createItem: `WITH inserted AS (
        INSERT INTO ${items} (process, id, state, data) VALUES ($1, $2, $3, $4::json)
        ON CONFLICT (process, id) DO NOTHING
        RETURNING *
      ), logged AS (
        INSERT INTO ${transitions} (process, item_id, from_state, to_state, version, kind)
        SELECT process, id, NULL, state, 1, 'create' FROM inserted
      )
      SELECT true AS created, pg_notify($5, $6)::text AS notified, ${itemColumns} FROM inserted
      UNION ALL
      SELECT false, NULL, ${itemColumns} FROM ${items}
      WHERE process = $1 AND id = $2 AND NOT EXISTS (SELECT 1 FROM inserted)`,
    getItem: `SELECT ${itemColumns} FROM ${items} WHERE process = $1 AND id = $2`,
    // A page of $3 items after the id $2 ('' for the first page: ids are never empty), along
    // the primary key (process, id); of one state ($4) along the index (process, state, id).
    // Two statements, not one with optional conditions (`$4 IS NULL OR …`), which a cached
    // generic plan could not turn into an index range: every page reads its rows and no more.
    listItems: `SELECT ${itemColumns} FROM ${items}
      WHERE process = $1 AND id > $2
      ORDER BY id LIMIT $3`,
    listItemsInState: `SELECT ${itemColumns} FROM ${items}
      WHERE process = $1 AND state = $4 AND id > $2
      ORDER BY id LIMIT $3`,
    history: `SELECT item_id, from_state, to_state, version, kind, idempotency_key, error, ${epochMs('at')} AS at
      FROM ${transitions} WHERE process = $1 AND item_id = $2 ORDER BY version`,
    now: 'SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_current_snapshot()::text AS snapshot',
    // The log after ($3, $4) for state $2, up to the oldest running transaction; a feed opened
    // at "now" also skips what had committed by then ($6, its snapshot). Ordered by the table's
    // columns (`l.xid`, `l.seq`): a bare `ORDER BY xid, seq` would name the text output columns,
    // sorting '10' before '9' (a page could then pass rows it never returned), and would sort
    // instead of reading the feed index in order.
    readLog: `SELECT l.xid::text AS xid, l.seq::text AS seq, l.item_id, l.version FROM ${transitions} AS l
      WHERE l.process = $1 AND l.to_state = $2 AND (l.xid, l.seq) > ($3::xid8, $4::bigint)
        AND l.xid < pg_snapshot_xmin(pg_current_snapshot())
        AND ($6::pg_snapshot IS NULL OR NOT pg_visible_in_snapshot(l.xid, $6::pg_snapshot))
      ORDER BY l.xid, l.seq LIMIT $5`,
    findClaimable: `SELECT id, state, version FROM ${items}
      WHERE process = $1 AND state = $2
        AND (lease_until <= statement_timestamp() OR (lease_owner IS NULL AND ($3 OR updated_at <= statement_timestamp() - ${msInterval('$5')})))
      ORDER BY lease_until NULLS FIRST, id LIMIT $4`,
    claim: `UPDATE ${items} SET lease_owner = $5, lease_until = statement_timestamp() + ${msInterval('$6')}, attempts = attempts + 1
      WHERE process = $1 AND id = $2 AND state = $3 AND version = $4 AND (lease_until IS NULL OR lease_until <= statement_timestamp())
      RETURNING ${itemColumns}`,
    extendLease: `UPDATE ${items} SET lease_until = statement_timestamp() + ${msInterval('$5')}
      WHERE process = $1 AND id = $2 AND version = $3 AND lease_owner = $4`,
    release: `UPDATE ${items} SET lease_until = statement_timestamp() + ${msInterval('$5')},
        attempts = CASE WHEN $6 THEN greatest(attempts - 1, 0) ELSE attempts END,
        last_error = coalesce($7, last_error)
      WHERE process = $1 AND id = $2 AND version = $3 AND lease_owner = $4`,
    // The compare-and-set of the item, its log row and the NOTIFY of the target state, in one
    // statement so that they commit together.
    transition: `WITH moved AS (
        UPDATE ${items} SET state = $5, version = version + 1, attempts = 0, lease_owner = NULL, lease_until = NULL,
          updated_at = statement_timestamp(), last_error = $8, data = coalesce($6::json, data)
        WHERE process = $1 AND id = $2 AND state = $3 AND version = $4
        RETURNING *
      ), logged AS (
        INSERT INTO ${transitions} (process, item_id, from_state, to_state, version, kind, idempotency_key, error)
        SELECT process, id, $3, state, version, $7, $9, $8 FROM moved
      )
      SELECT pg_notify($10, $11)::text AS notified, ${itemColumns} FROM moved`,
    // historyRetention: log rows recorded more than $1 ms ago, a batch at a time on the `at`
    // index. The log is append-only: no row lock (it would need UPDATE, see grantsSql).
    clearHistory: clearExpiredBatchSql(transitions, `at < statement_timestamp() - ${msInterval('$1')}`, { appendOnly: true }),
  };
}
