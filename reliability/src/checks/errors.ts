/**
 * Errors, all typed: each failure the adapters map is produced for real — a read-only server,
 * missing privileges, a key too long for the index, tables that do not fit, TLS settings that
 * cannot work, a pooler refusing a setting, a document over MongoDB's limit — and must reach the
 * caller as a `StowageError` with the code the README documents, carrying the driver's error
 * (with the expected SQLSTATE or code) as `cause`. Cases refused before any driver call have no
 * cause to carry.
 *
 * Proves: raw errors = 0 and wrong codes = 0, one row per error class.
 */
import type { BackendReport } from '../report.ts';
import { MONGO_BACKENDS, POSTGRES_BACKENDS, type Backend } from '../backends/types.ts';
import { formatMs } from '../util.ts';

export async function errors(backend: Backend, report: BackendReport): Promise<void> {
  const started = performance.now();
  const name = backend.target.name;
  if (POSTGRES_BACKENDS.includes(name)) {
    const { postgresErrors } = await import('./errors-postgres.ts');
    await postgresErrors(backend, report);
  } else if (MONGO_BACKENDS.includes(name)) {
    const { mongoErrors } = await import('./errors-mongo.ts');
    await mongoErrors(backend, report);
  } else {
    report.notApplicable('errors', 'in-memory adapter: no driver, no driver errors');
    return;
  }
  report.info('errors', 'duration', formatMs(performance.now() - started));
}
