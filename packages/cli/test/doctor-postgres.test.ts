import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { connect, grantsSql } from '@stowage/postgres';
import { findPgBouncer, findPostgresServer, type FoundBackend } from '@stowage/test-env';
import { goGoScopePostgresDdl, goGoScopePostgresWrites } from '../../postgres/test/support/legacy.js';
import { stowage, unique } from './support.js';

/*
 * `stowage doctor` on PostgreSQL, each finding against a deployment that has the problem:
 * a role without one grant, LISTEN through PgBouncer (transaction and session mode), and a
 * table of awaitly-postgres's layout not adopted yet. Each doctor run gets a schema of its
 * own, so tables other tests leave in `public` do not count.
 */

let server: FoundBackend;
let admin: pg.Client;
const schemas: string[] = [];
const roles: string[] = [];

beforeAll(async () => {
  server = (await findPostgresServer())!;
  admin = new pg.Client(server.url);
  await admin.connect();
});

/** The two databases the seeded-table cases run on (neither is stopped by them: the file's setup owns both). */
const seedBackends = [
  ['PGlite', async (): Promise<FoundBackend> => ({ url: inject('pgliteUrl'), source: 'embedded', label: 'PGlite', stop: async () => {} })],
  ['server', async () => ({ ...server, stop: async () => {} })],
] as const;

afterAll(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  for (const role of roles) await admin.query(`DROP OWNED BY "${role}"; DROP ROLE IF EXISTS "${role}"`);
  await admin.end();
});

function urlAs(url: string, user: string, password?: string): string {
  const parsed = new URL(url);
  parsed.username = user;
  if (password !== undefined) parsed.password = password;
  return parsed.toString();
}

const lines = (text: string, severity: string) => text.split('\n').filter((line) => line.startsWith(severity));

describe('doctor: privileges', () => {
  it("reports each privilege of grantsSql() the role lacks, and exits 1", async () => {
    const schema = unique('cli_grants');
    schemas.push(schema);
    const role = unique('cli_role');
    roles.push(role);
    const db = connect({ url: server.url, schema });
    await db.locks().acquire('k', 1000);
    await db.snapshots({ lock: true }).save('wf', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: '' } });
    await db.close();
    await admin.query(`CREATE ROLE "${role}" LOGIN`);
    await admin.query(grantsSql(role, { schema, only: ['locks', 'snapshots', 'workflowLocks'] }));

    const granted = await stowage(['doctor', urlAs(server.url, role), '--schema', schema]);
    expect(lines(granted.stdout, 'ERROR')).toEqual([]);
    expect(granted.stdout).toMatch(/^ok +privileges: role cli_role_\w+ has the \d+ privilege\(s\) grantsSql\(\) lists/m);
    expect(granted.code).toBe(0);

    await admin.query(`REVOKE DELETE ON "${schema}".stowage_locks FROM "${role}"`);
    const lacking = await stowage(['doctor', urlAs(server.url, role), '--schema', schema]);
    expect(lines(lacking.stdout, 'ERROR')).toEqual([
      `ERROR privileges: role ${role} lacks DELETE on table "${schema}"."stowage_locks": run as the owner: GRANT DELETE ON TABLE "${schema}"."stowage_locks" TO "${role}" (grantsSql() lists them all)`,
    ]);
    expect(lacking.code).toBe(1);
  });
});

describe('doctor: PgBouncer and LISTEN', () => {
  it('transaction mode with LISTEN through it: an error; --listen-url at the server clears it', async () => {
    const bouncer = (await findPgBouncer())!;
    const schema = unique('cli_pool');
    const [through, direct] = await Promise.all([
      stowage(['doctor', bouncer.url, '--schema', schema]),
      stowage(['doctor', bouncer.url, '--schema', schema, '--listen-url', server.url]),
    ]);
    expect(through.stdout).toMatch(/^ok +pooler: statements go through a pooler \(PgBouncer\) in transaction mode/m);
    expect(lines(through.stdout, 'ERROR')).toEqual([expect.stringMatching(/^ERROR LISTEN: LISTEN is routed through a pooler in transaction mode via the URL/)]);
    expect(through.code).toBe(1);
    expect(lines(direct.stdout, 'ERROR')).toEqual([]);
    expect(direct.stdout).toMatch(/^ok +LISTEN: --listen-url postgresql:\/\/postgres@127\.0\.0\.1:5432\/test reaches the server's own session/m);
    expect(direct.code).toBe(0);
  });

  describe('session mode', () => {
    let pgbouncer: ChildProcess;
    let dir: string;
    let url: string;

    beforeAll(async () => {
      // A PgBouncer of our own in session mode, in front of the same server.
      const port = await freePort();
      const target = new URL(server.url);
      dir = mkdtempSync(join(tmpdir(), 'stowage-cli-pgbouncer-'));
      writeFileSync(join(dir, 'users.txt'), `"${target.username}" ""\n`);
      writeFileSync(
        join(dir, 'pgbouncer.ini'),
        `[databases]\n${target.pathname.slice(1)} = host=${target.hostname} port=${target.port || 5432} dbname=${target.pathname.slice(1)}\n` +
          `[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = ${port}\nunix_socket_dir =\nauth_type = trust\nauth_file = ${join(dir, 'users.txt')}\n` +
          'pool_mode = session\nmax_client_conn = 50\ndefault_pool_size = 10\nignore_startup_parameters = extra_float_digits\n',
      );
      // PgBouncer refuses to run as root: as root, run it as the postgres system user.
      const asRoot = process.getuid?.() === 0;
      if (asRoot) {
        chmodSync(dir, 0o755);
        for (const file of ['', 'users.txt', 'pgbouncer.ini']) chownSync(join(dir, file), uidOf('postgres'), 0);
      }
      pgbouncer = spawn('/usr/sbin/pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
      url = `postgresql://${target.username}@127.0.0.1:${port}${target.pathname}`;
      for (let attempt = 0; ; attempt++) {
        const client = new pg.Client(url);
        try {
          await client.connect();
          await client.end();
          break;
        } catch (error) {
          if (attempt > 100) throw error;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
    });

    afterAll(() => {
      pgbouncer?.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    });

    it('LISTEN routed through it: an error naming session mode', async () => {
      const { stdout, code } = await stowage(['doctor', url, '--schema', unique('cli_pool')]);
      expect(stdout).toMatch(/^ok +pooler: statements go through a pooler \(PgBouncer\) in session mode/m);
      expect(lines(stdout, 'ERROR')).toEqual([expect.stringMatching(/^ERROR LISTEN: LISTEN is routed through a pooler in session mode/)]);
      expect(code).toBe(1);
    });
  });
});

describe.each(seedBackends)('doctor and adopt: awaitly-postgres tables on %s', (_name, start) => {
  let backend: FoundBackend;
  let client: pg.Client;
  const schema = unique('cli_seed');

  beforeAll(async () => {
    backend = await start();
    schemas.push(schema);
    client = new pg.Client(backend.url);
    await client.connect();
    // awaitly-postgres's tables, as its README creates them, with rows.
    await client.query(`CREATE SCHEMA "${schema}"; SET search_path = "${schema}";
      CREATE TABLE awaitly_workflow_state (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at TIMESTAMP);
      CREATE INDEX idx_awaitly_workflow_state_expires_at ON awaitly_workflow_state (expires_at);
      CREATE TABLE awaitly_snapshots (id TEXT PRIMARY KEY, snapshot JSONB NOT NULL, updated_at TIMESTAMPTZ DEFAULT NOW());
      INSERT INTO awaitly_workflow_state VALUES ('workflow:state:a', '{}', NULL), ('workflow:state:b', '{}', NULL);
      INSERT INTO awaitly_snapshots (id, snapshot) VALUES
        ('checkout-1', '{"formatVersion":1,"steps":{"pay":{"ok":true,"value":1}},"execution":{"status":"running","lastUpdated":"x","currentStepId":"ship"}}');
      RESET search_path`);
  });

  afterAll(async () => {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
    await backend.stop();
  });

  it('doctor warns of each unadopted table; adopt --dry-run lists the changes; --apply adopts through the store, rows kept', async () => {
    const doctor = await stowage(['doctor', backend.url, '--schema', schema]);
    expect(lines(doctor.stdout, 'WARN').filter((line) => line.includes('adoption'))).toEqual([
      expect.stringMatching(new RegExp(`^WARN  adoption: "${schema}"\\."awaitly_workflow_state" is awaitly-postgres's key-value table \\(about \\d+ rows\\), not adopted yet: the first store to start upgrades it in place`)),
      expect.stringMatching(new RegExp(`^WARN  adoption: "${schema}"\\."awaitly_snapshots" is awaitly-postgres's snapshot table`)),
    ]);

    const plan = await stowage(['adopt', backend.url, '--schema', schema, '--dry-run']);
    expect(plan.code).toBe(0);
    expect(plan.stdout).toContain(`"${schema}"."awaitly_workflow_state": awaitly-postgres's key-value table`);
    expect(plan.stdout).toContain('  - add column version BIGINT NOT NULL DEFAULT 1');
    expect(plan.stdout).toContain('  - expires_at TIMESTAMP -> TIMESTAMPTZ');
    expect(plan.stdout).toContain(`"${schema}"."awaitly_snapshots": awaitly-postgres's snapshot table`);
    expect(plan.stdout).toContain('  - rename id to snapshot_id, so that awaitly-postgres code still running fails');
    expect(plan.stdout).toContain('  - primary key (prefix, snapshot_id), snapshot_id COLLATE "C"');
    // --dry-run changed nothing.
    const columns = await client.query(`SELECT count(*)::int AS n FROM information_schema.columns WHERE table_schema = $1 AND column_name = 'version'`, [schema]);
    expect(columns.rows[0].n).toBe(0);

    const refused = await stowage(['adopt', backend.url, '--schema', schema, '--apply'], { input: 'no\n' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('not applied');

    const applied = await stowage(['adopt', backend.url, '--schema', schema, '--apply', '--yes']);
    expect(applied.stderr).toContain('[2/2]');
    expect(applied.code).toBe(0);
    const [after, again, workflows] = await Promise.all([
      stowage(['doctor', backend.url, '--schema', schema]),
      stowage(['adopt', backend.url, '--schema', schema, '--dry-run']),
      stowage(['inspect', 'workflows', '--url', backend.url, '--schema', schema, '--json']),
    ]);
    expect(after.stdout).not.toMatch(/^WARN {2}adoption/m);
    expect(again.stdout).toMatch(/^nothing to adopt/);
    expect(JSON.parse(workflows.stdout).items).toEqual([expect.objectContaining({ namespace: '', id: 'checkout-1', status: 'running', lastStep: 'ship', steps: 1 })]);
    const kept = await client.query(`SELECT count(*)::int AS n FROM "${schema}".awaitly_workflow_state`);
    expect(kept.rows[0].n).toBe(2);
  });

  it("refuses awaitly-postgres's lock table: doctor and adopt exit 1", async () => {
    await client.query(`CREATE TABLE "${schema}".awaitly_workflow_locks (workflow_id TEXT PRIMARY KEY, owner_token TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`);
    const [doctor, plan] = await Promise.all([
      stowage(['doctor', backend.url, '--schema', schema]),
      stowage(['adopt', backend.url, '--schema', schema, '--dry-run']),
    ]);
    expect(lines(doctor.stdout, 'ERROR')).toEqual([
      expect.stringMatching(
        new RegExp(`^ERROR layout: table "${schema}"\\."awaitly_workflow_locks" has a layout stowage does not know for workflowLocks: .*: it is awaitly-postgres's lock table, which only holds leases`),
      ),
    ]);
    expect(doctor.code).toBe(1);
    expect(plan.stdout).toMatch(/^ {2}REFUSED: table .*"awaitly_workflow_locks" .*: it is awaitly-postgres's lock table/m);
    expect(plan.code).toBe(1);
  });
});

describe.each(seedBackends)("doctor and adopt: go-go-scope's own tables on %s", (_name, start) => {
  let backend: FoundBackend;
  let pool: pg.Pool;
  const schema = unique('cli_ggs');
  const tables = ['go_goscope_locks', 'go_goscope_circuit', 'go_goscope_cache', 'go_goscope_idempotency', 'go_goscope_checkpoints'];

  beforeAll(async () => {
    backend = await start();
    schemas.push(schema);
    pool = new pg.Pool({ connectionString: backend.url, max: 1 });
    // go-go-scope's tables as its own PostgreSQL adapters create them, with a row of each written by them.
    await pool.query(`CREATE SCHEMA "${schema}"; SET search_path = "${schema}"; ${goGoScopePostgresDdl()}; RESET search_path`);
    await goGoScopePostgresWrites(pool, `"${schema}"`, 'app:');
  });

  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    await backend.stop();
  });

  it('doctor warns of each as adopted in place by goGoScopePersistence, never refused; adopt --apply --key-prefix converts them', async () => {
    const [doctor, plan] = await Promise.all([
      stowage(['doctor', backend.url, '--schema', schema]),
      stowage(['adopt', backend.url, '--schema', schema, '--dry-run', '--key-prefix', 'app:']),
    ]);
    expect(plan.stdout).not.toContain('REFUSED');
    expect(doctor.stdout + plan.stdout).not.toMatch(/does not know|only through goGoScopePersistence/);
    expect(lines(doctor.stdout, 'ERROR')).toEqual([]);
    expect(lines(doctor.stdout, 'WARN').filter((line) => line.includes('adoption'))).toEqual(
      tables.map((table) =>
        expect.stringMatching(
          new RegExp(`^WARN  adoption: "${schema}"\\."${table}" is go-go-scope's .* table \\(.*\\) \\(about \\d+ rows\\), not adopted yet: goGoScopePersistence converts it in place when it first starts`),
        ),
      ),
    );
    expect(doctor.code).toBe(0);
    if (_name === 'server') {
      // The same tables found through the search path (no --schema), as an application without
      // a schema option finds them. The URL's `options` set it: PGlite's socket server ignores them.
      const onPath = new URL(backend.url);
      onPath.searchParams.set('options', `-c search_path=${schema}`);
      const unqualified = await stowage(['doctor', onPath.toString()]);
      expect(lines(unqualified.stdout, 'ERROR')).toEqual([]);
      expect(lines(unqualified.stdout, 'WARN').filter((line) => line.includes('adoption'))).toEqual(
        tables.map((table) => expect.stringMatching(new RegExp(`^WARN  adoption: "${table}" is go-go-scope's .*: goGoScopePersistence converts it in place`))),
      );
    }

    expect(plan.code).toBe(0);
    for (const table of tables) {
      expect(plan.stdout).toMatch(new RegExp(`^"${schema}"\\."${table}": go-go-scope's .*, adopted in place by goGoScopePersistence, about \\d+ row\\(s\\)$`, 'm'));
    }
    expect(plan.stdout).toContain("  - keys keyPrefix + 'lock:' + key -> keyPrefix + key (goGoScopePersistence's keyPrefix)");
    expect(plan.stdout).toContain('  - timestamp BIGINT (epoch milliseconds) -> TIMESTAMPTZ');
    expect(plan.stdout).toContain('  - --apply converts it with keyPrefix "app:" (--key-prefix) and idempotencyKeyPrefix ""');

    const applied = await stowage(['adopt', backend.url, '--schema', schema, '--apply', '--yes', '--key-prefix', 'app:']);
    expect(applied.stderr).toContain('[5/5]');
    expect(applied.code).toBe(0);
    const [after, again] = await Promise.all([
      stowage(['doctor', backend.url, '--schema', schema]),
      stowage(['adopt', backend.url, '--schema', schema, '--dry-run']),
    ]);
    expect(after.stdout).not.toMatch(/^WARN {2}adoption/m);
    expect(lines(after.stdout, 'ERROR')).toEqual([]);
    expect(again.stdout).toMatch(/^nothing to adopt/);
    // go-go-scope's held lock, under goGoScopePersistence's key, with fence 1.
    const lock = await pool.query(`SELECT key, owner, fence::int AS fence FROM "${schema}".go_goscope_locks`);
    expect(lock.rows).toEqual([{ key: 'app:resource:123', owner: 'worker-1', fence: 1 }]);
  });
});

describe('passwords are never printed', () => {
  it('redacts URLs in findings and errors', async () => {
    const secret = 'sekret-pass-42';
    const [doctor, refused, unknown] = await Promise.all([
      // trust authentication ignores the password: the run succeeds and quotes --listen-url.
      stowage(['doctor', urlAs(server.url, 'postgres', secret), '--listen-url', urlAs(server.url, 'postgres', secret), '--schema', unique('cli_pw')]),
      stowage(['inspect', 'locks', '--url', `postgresql://postgres:${secret}@127.0.0.1:1/test`]),
      stowage(['inspect', '--url', `mysql://root:${secret}@localhost/db`]),
    ]);
    expect(doctor.stdout).toContain('--listen-url postgresql://postgres:***@127.0.0.1:5432/test');
    expect(refused.code).toBe(2);
    expect(unknown.stderr).toBe(
      'stowage: E_INVALID_OPTION: cannot tell the database of mysql://root:***@localhost/db: give a postgres://, postgresql://, mongodb:// or mongodb+srv:// URL\n',
    );
    for (const output of [doctor, refused, unknown]) expect(output.stdout + output.stderr).not.toContain(secret);
  });
});

describe('bad input', () => {
  it('gets a typed error naming the fix, exit code 2, and reads nothing', async () => {
    const on = ['--url', server.url, '--schema', unique('cli_bad')];
    const results = await Promise.all([
      stowage(['inspect', 'workflows', ...on, '--after', 'garbage']),
      stowage(['inspect', 'workflows', ...on, '--older-than', 'yesterday']),
      stowage(['inspect', 'locks', ...on, '--status', 'stuck']),
      stowage(['inspect', 'sessions', ...on]),
      stowage(['inspect', 'workflows', ...on, '--limit', '0']),
      stowage(['adopt', server.url, '--dry-run', '--apply']),
      stowage(['frobnicate']),
    ]);
    expect(results.map((result) => [result.code, result.stderr.trim()])).toEqual([
      [2, 'stowage: E_INVALID_OPTION: --after takes the cursor a page printed (its "more: --after …" line or nextCursor), got "garbage"'],
      [2, 'stowage: E_INVALID_OPTION: --older-than takes a duration such as 30s, 10m, 2h or 7d, got "yesterday" (stowage --help)'],
      [2, 'stowage: E_INVALID_OPTION: --status of locks: held, expired or all (stowage --help)'],
      [2, 'stowage: E_INVALID_OPTION: inspect shows workflows, locks, breakers, idempotency, processes, caches or workflow <id>, not "sessions" (stowage --help)'],
      [2, 'stowage: E_INVALID_OPTION: --limit must be an integer from 1 to 10000 (stowage --help)'],
      [2, 'stowage: E_INVALID_OPTION: adopt takes exactly one of --dry-run and --apply (stowage --help)'],
      [2, 'stowage: E_INVALID_OPTION: unknown command "frobnicate" (stowage --help)'],
    ]);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

function uidOf(user: string): number {
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((entry) => entry.startsWith(`${user}:`));
  return Number(line!.split(':')[2]);
}
