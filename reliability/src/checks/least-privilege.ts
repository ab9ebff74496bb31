/**
 * Least privilege: an administrator creates every table from `schemaSql()` in a schema of its
 * own and grants a fresh login role exactly what `grantsSql(role)` returns; every store then
 * runs its basic operations as that role with `autoCreate: false` — key-value, snapshots with
 * their lock, locks (a waiting acquisition woken by a release), cache, circuit breaker,
 * checkpoints, idempotency and the process backend, all from one `connect()`.
 *
 * Proves: permission errors = 0 (and no other failure), the role is really unprivileged (no
 * superuser, no CREATE), and a role without those grants gets E_INVALID_OPTION — "fix the
 * configuration" — never the retryable E_UNAVAILABLE.
 */
import { isStowageError } from '@stowage/core';
import { connect, grantsSql, schemaSql, PostgresKeyValueStore } from '@stowage/postgres';
import { describeError, type BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { APPLICATION_NAME, withClient } from '../backends/pg-admin.ts';
import { formatMs } from '../util.ts';
import { judge, requiredText } from './error-cases.ts';
import { Roles } from './roles.ts';

interface Operations {
  run: number;
  permission: string[];
  other: string[];
}

/** Runs every store's basic operations as the role; each failure is recorded, and the next operation still runs. */
async function storeOperations(url: string, schema: string): Promise<Operations> {
  const result: Operations = { run: 0, permission: [], other: [] };
  const op = async <T>(what: string, fn: () => Promise<T>): Promise<T | undefined> => {
    result.run += 1;
    try {
      return await fn();
    } catch (error) {
      const state = isStowageError(error) ? (error.cause as { code?: unknown } | undefined)?.code : undefined;
      (state === '42501' ? result.permission : result.other).push(`${what}: ${describeError(error)}`);
      return undefined;
    }
  };
  const db = connect({ url, schema, autoCreate: false, applicationName: `${APPLICATION_NAME}-role`, pool: { max: 3 } });
  try {
    const kv = db.kv();
    await op('kv.set', () => kv.set('k', 'v', { ttl: 60_000 }));
    const entry = await op('kv.getEntry', () => kv.getEntry('k'));
    await op('kv.compareAndSet', () => kv.compareAndSet('k', 'w', entry?.version ?? null));
    await op('kv.keys', () => kv.keys('k*'));
    await op('kv.setMany', () => kv.setMany([{ key: 'a', value: '1' }, { key: 'b', value: '2' }]));
    await op('kv.getMany', () => kv.getMany(['a', 'b']));
    await op('kv.deleteMany', () => kv.deleteMany(['a', 'b']));
    await op('kv.delete', () => kv.delete('k'));
    await op('kv.clearExpired', () => kv.clearExpired());

    const snapshots = db.snapshots({ lock: true });
    await op('snapshots.save', () => snapshots.save('wf', { formatVersion: 1 } as never));
    await op('snapshots.loadVersioned', () => snapshots.loadVersioned('wf'));
    await op('snapshots.list', () => snapshots.list({ limit: 10 }));
    const lease = await op('snapshots.tryAcquire', () => snapshots.tryAcquire('wf', { ttlMs: 60_000 }));
    await op('snapshots.renew', () => snapshots.renew('wf', lease?.ownerToken ?? 'none', { ttlMs: 60_000 }));
    await op('snapshots.release', () => snapshots.release('wf', lease?.ownerToken ?? 'none'));
    await op('snapshots.delete', () => snapshots.delete('wf'));

    const locks = db.locks();
    const handle = await op('locks.acquire', () => locks.acquire('job', 60_000));
    const waiting = op('locks.acquire (waiting, woken by the release)', () => locks.acquire('job', 60_000, { wait: 30_000 }));
    await op('lock handle.extend', async () => handle?.extend(60_000));
    await op('lock handle.release', async () => handle?.release());
    await op('lock handle.release (the waiter)', async () => (await waiting)?.release());
    await op('locks.withLock', () => locks.withLock('job', async () => null, { ttl: 10_000 }));
    await op('locks.forceRelease', () => locks.forceRelease('job'));
    await op('locks.clearExpired', () => locks.clearExpired());

    const cache = db.cache({ prefix: 'users:' });
    await op('cache.set', () => cache.set('1', { name: 'Ada' }, 60_000));
    await op('cache.get', () => cache.get('1'));
    await op('cache.getOrSet', () => cache.getOrSet('2', async () => ({ name: 'Bob' }), 60_000));
    await op('cache.keys', () => cache.keys('*'));
    await op('cache.delete', () => cache.delete('1'));
    await op('cache.clear', () => cache.clear());

    const breakers = db.circuitBreaker();
    await op('circuitBreaker.recordFailure', () => breakers.recordFailure('api', 3, { cooldown: 1000 }));
    await op('circuitBreaker.getState', () => breakers.getState('api'));
    await op('circuitBreaker.recordSuccess', () => breakers.recordSuccess('api'));
    await op('circuitBreaker.delete', () => breakers.delete('api'));

    const checkpoints = db.checkpoints();
    await op('checkpoints.save', () => checkpoints.save({ id: 'cp-1', taskId: 'task', sequence: 1, timestamp: 0, progress: 0.5, data: { offset: 1 } }));
    await op('checkpoints.loadLatest', () => checkpoints.loadLatest('task'));
    await op('checkpoints.list', () => checkpoints.list('task'));
    await op('checkpoints.cleanup', () => checkpoints.cleanup('task', 0));
    await op('checkpoints.deleteAll', () => checkpoints.deleteAll('task'));

    const idempotency = db.idempotency();
    const claim = await op('idempotency.reserve', () => idempotency.reserve('charge', 60_000));
    const token = claim?.status === 'acquired' ? claim.token : 'none';
    await op('idempotency.complete', () => idempotency.complete('charge', token, { ok: true }, 60_000));
    await op('idempotency.get', () => idempotency.get('charge'));
    await op('idempotency.delete', () => idempotency.delete('charge'));

    const backend = db.process();
    const created = await op('process.createItem', () => backend.createItem({ process: 'p', id: 'item', state: 'new', data: {} }));
    const claimed = await op('process.claim', () =>
      backend.claim({ process: 'p', itemId: 'item', state: 'new', version: created?.item.version ?? 1, owner: 'w', lease: 60_000 }),
    );
    await op('process.transition', () =>
      backend.transition({ process: 'p', itemId: 'item', from: 'new', version: claimed?.version ?? 1, to: 'done', kind: 'advance', key: 'k' }),
    );
    await op('process.getItem', () => backend.getItem('p', 'item'));
    await op('process.history', () => backend.history('p', 'item'));
  } finally {
    await db.close();
  }
  return result;
}

export async function leastPrivilege(backend: Backend, report: BackendReport): Promise<void> {
  const check = 'least privilege';
  if (backend.target.name !== 'postgres') {
    report.notApplicable(check, 'roles: PostgreSQL server only (PgBouncer admits its auth file users)');
    return;
  }
  const started = performance.now();
  const url = backend.target.url!;
  const schema = `${backend.target.namespace}_lp`;
  const roles = new Roles(url, backend.target.namespace);
  try {
    const app = await roles.create('app', (name) => [schemaSql({ schema }), grantsSql(name, { schema })]);
    const [status] = await withClient(url, async (client) =>
      (
        await client.query<{ superuser: boolean; create: boolean }>(
          `SELECT rolsuper AS superuser, has_schema_privilege($1, $2, 'CREATE') AS create FROM pg_roles WHERE rolname = $1`,
          [app.name, schema],
        )
      ).rows,
    );
    const unprivileged = status !== undefined && !status.superuser && !status.create;
    report.expect(check, 'role given grantsSql(role): superuser / CREATE on the schema', `${status?.superuser ? 'yes' : 'no'} / ${status?.create ? 'yes' : 'no'}`, 'no / no', unprivileged);

    const ops = await storeOperations(app.url, schema);
    report.info(check, 'operations run as that role, autoCreate: false (8 stores, one connect())', ops.run);
    report.expect(check, 'permission errors (42501)', ops.permission.length, '= 0', ops.permission.length === 0);
    report.expect(check, 'other failures', ops.other.length, '= 0', ops.other.length === 0);
    for (const failure of [...ops.permission, ...ops.other].slice(0, 8)) report.note(`least privilege: ${failure}`);

    const stranger = await roles.create('stranger');
    const kv = new PostgresKeyValueStore({ url: stranger.url, schema, autoCreate: false, applicationName: `${APPLICATION_NAME}-role` });
    const outcome = await kv.set('k', 'v').then(
      () => ({ rejected: false }),
      (error: unknown) => ({ rejected: true, error }),
    );
    await kv.close();
    const expected = { code: 'E_INVALID_OPTION' as const, cause: '42501' };
    const verdict = judge(expected, outcome);
    report.expect(check, 'role without those grants: kv.set', verdict.got, requiredText(expected), verdict.ok);
  } finally {
    await roles.dropAll();
    await withClient(url, (client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
  }
  report.info(check, 'duration', formatMs(performance.now() - started));
}
