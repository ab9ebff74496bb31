import { duration, type Column } from './output.js';
import type { BreakerRow, CacheRow, IdempotencyRow, LockRow, ProcessRow, RowOf, Section, WorkflowRow } from './model.js';

/** The columns of each view in a table for people (`--json` prints the rows as they are). */
export const COLUMNS: { [S in Section]: Column<RowOf[S]>[] } = {
  workflows: [
    { title: 'NAMESPACE', value: (row: WorkflowRow) => row.namespace || '-' },
    { title: 'ID', value: (row) => row.id },
    { title: 'STATUS', value: (row) => row.status },
    { title: 'LAST STEP', value: (row) => row.lastStep ?? '-' },
    { title: 'STEPS', value: (row) => String(row.steps) },
    { title: 'UPDATED', value: (row) => row.updatedAt },
    { title: 'LEASE', value: (row) => (row.leaseOwner === null ? '-' : `${row.leaseOwner} (${duration(row.leaseExpiresInMs)} left)`) },
  ],
  locks: [
    { title: 'KEY', value: (row: LockRow) => row.key },
    { title: 'OWNER', value: (row) => row.owner },
    { title: 'FENCE', value: (row) => row.fence },
    { title: 'EXPIRES IN', value: (row) => (row.expiresInMs > 0 ? duration(row.expiresInMs) : `expired ${duration(-row.expiresInMs)} ago`) },
    { title: 'TABLE', value: (row) => row.table },
  ],
  breakers: [
    { title: 'KEY', value: (row: BreakerRow) => row.key },
    { title: 'STATE', value: (row) => row.state },
    { title: 'FAILURES', value: (row) => String(row.failures) },
    { title: 'LAST FAILURE', value: (row) => row.lastFailure ?? '-' },
    { title: 'OPEN UNTIL', value: (row) => row.openUntil ?? '-' },
  ],
  idempotency: [
    { title: 'KEY', value: (row: IdempotencyRow) => row.key },
    { title: 'STATUS', value: (row) => row.status },
    { title: 'AGE', value: (row) => duration(row.ageMs) },
    { title: 'EXPIRES IN', value: (row) => (row.expiresInMs === null ? 'never' : duration(row.expiresInMs)) },
  ],
  processes: [
    { title: 'PROCESS', value: (row: ProcessRow) => row.process },
    { title: 'STATE', value: (row) => row.state },
    { title: 'ITEMS', value: (row) => String(row.items) },
    { title: 'LEASED', value: (row) => String(row.leased) },
    { title: 'OLDEST', value: (row) => row.oldest ?? '-' },
  ],
  caches: [
    { title: 'PREFIX', value: (row: CacheRow) => row.prefix || '-' },
    { title: 'ENTRIES', value: (row) => String(row.entries) },
    { title: 'EXPIRED, NOT SWEPT', value: (row) => String(row.expired) },
  ],
};
