/**
 * The error classes of `@stowage/mongo` (README, "Errors") mapped since, that the stand-ins
 * can produce: documents over MongoDB's 16 MiB limit, refused by the driver's serializer (the
 * driver's error must be the cause) or measured by the store before sending.
 */
import { MongoCheckpointStore } from '@stowage/mongo';
import type { BackendReport } from '../report.ts';
import { MONGO_BACKENDS, type Backend } from '../backends/types.ts';
import { runCases, type ErrorCase } from './error-cases.ts';

/** A string over MongoDB's 16 MiB document limit. */
const OVERSIZED = () => 'x'.repeat(17 * 1024 * 1024);

interface MongoContext {
  backend: Backend;
}

const MONGO_CASES: ErrorCase<MongoContext>[] = [
  {
    what: 'document over 16 MiB (kv value of 17 MiB)',
    code: 'E_INVALID_VALUE',
    cause: 'any',
    only: MONGO_BACKENDS,
    produce: async ({ backend }) => {
      const kv = await backend.kv({ table: 'errors_oversized' });
      try {
        await kv.set('big', OVERSIZED());
      } finally {
        await kv.close();
      }
    },
  },
  {
    what: 'document over 16 MiB (snapshot of 17 MiB)',
    code: 'E_INVALID_VALUE',
    cause: 'any',
    only: MONGO_BACKENDS,
    produce: async ({ backend }) => {
      const snapshots = await backend.snapshots({ table: 'errors_oversized_snapshots' });
      try {
        await snapshots.save('big', { text: OVERSIZED() });
      } finally {
        await snapshots.close();
      }
    },
  },
  {
    what: 'document over 16 MiB (checkpoint of 17 MiB, measured before sending)',
    code: 'E_INVALID_VALUE',
    cause: null,
    only: MONGO_BACKENDS,
    produce: async ({ backend }) => {
      const checkpoints = new MongoCheckpointStore({ url: backend.target.url!, database: backend.target.namespace, collection: 'errors_oversized_checkpoints' });
      try {
        await checkpoints.save({ id: 'big', taskId: 'task', sequence: 1, timestamp: 0, progress: 0, data: OVERSIZED() });
      } finally {
        await checkpoints.close();
      }
    },
  },
];

export async function mongoErrors(backend: Backend, report: BackendReport): Promise<void> {
  await runCases(MONGO_CASES, { backend }, backend.target.name, report);
}
