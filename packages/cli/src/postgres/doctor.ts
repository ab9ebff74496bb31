import type pg from 'pg';
import type { Finding } from '../model.js';
import { loadPeer } from '../peers.js';
import { redactUrl } from '../redact.js';
import type { PgSession } from './connection.js';
import { readTables, storeTables } from './layout.js';

/*
 * `stowage doctor` on PostgreSQL: what the deployment must give for the promises of
 * @stowage/postgres to hold (README "Production notes"), one finding per check.
 */

interface DoctorInput {
  listenUrl?: string;
  schema?: string;
  names?: Record<string, string>;
}

export async function doctor(session: PgSession, url: string, input: DoctorInput): Promise<Finding[]> {
  const findings: Finding[] = [];
  const [server] = await session.read<{
    full_version: string; version: string; role: string; database: string; pid: number; is_super: boolean;
    synchronous_commit: string; standbys: string; statement_timeout: string; lock_timeout: string; idle_timeout: string;
  }>(`SELECT version() AS full_version, current_setting('server_version') AS version, current_user AS role, current_database() AS database, pg_backend_pid() AS pid,
      (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS is_super,
      current_setting('synchronous_commit') AS synchronous_commit, current_setting('synchronous_standby_names') AS standbys,
      current_setting('statement_timeout') AS statement_timeout, current_setting('lock_timeout') AS lock_timeout,
      current_setting('idle_in_transaction_session_timeout') AS idle_timeout`);
  const s = server!;
  findings.push({ severity: 'ok', check: 'connection', message: `PostgreSQL ${s.version}, database ${s.database}, role ${s.role}${s.is_super ? ' (superuser)' : ''}` });

  if (s.full_version.includes('PGlite')) {
    findings.push({ severity: 'info', check: 'server', message: 'embedded PGlite: for tests and examples; LISTEN/NOTIFY wake-ups are off there (waits poll)' });
  } else {
    await poolerFindings(findings, url, input.listenUrl);
  }
  await grantFindings(findings, session, s.role, input);
  await tableFindings(findings, session, input.schema);

  if (s.synchronous_commit === 'off' || s.synchronous_commit === 'local') {
    findings.push({
      severity: 'warn',
      check: 'synchronous_commit',
      message: `synchronous_commit = ${s.synchronous_commit}: a crash or failover can lose commits stowage already reported (a lock grant, a version, an idempotency result); set it to on (or remote_apply with a synchronous standby)`,
    });
  }
  if (s.standbys === '') {
    findings.push({
      severity: 'info',
      check: 'synchronous standby',
      message: 'no synchronous_standby_names: failing over to an asynchronous standby can lose acknowledged writes (fences could repeat); configure a synchronous standby if you fail over',
    });
  }
  if (s.statement_timeout === '0') {
    findings.push({ severity: 'info', check: 'statement_timeout', message: "0 (none): a stuck statement holds its pooled connection; set it on the role (ALTER ROLE … SET statement_timeout = '5s')" });
  }
  if (s.lock_timeout === '0') {
    findings.push({ severity: 'info', check: 'lock_timeout', message: '0 (none): a statement waits for row locks as long as statement_timeout allows' });
  }
  if (s.idle_timeout === '0') {
    findings.push({ severity: 'info', check: 'idle_in_transaction_session_timeout', message: '0 (none): an idle transaction holds up adoption (CREATE INDEX CONCURRENTLY) and vacuum; set one' });
  }
  return findings;
}

type Route = { pooled: false } | { pooled: true; mode: 'session' | 'transaction' | 'statement' };

/**
 * Whether `url` reaches the server's own session or a pooler: a pooler (PgBouncer) hands its
 * clients process ids of its own, so the id the connection was given differs from
 * `pg_backend_pid()` (the same test @stowage/postgres makes before its first LISTEN).
 * The pool mode: in session mode no other client can ever get our server connection; in
 * transaction mode the next client to begin a transaction usually gets it (PgBouncer hands out
 * the most recently used server connection first).
 */
async function route(url: string): Promise<Route> {
  const { default: driver } = await loadPeer<{ default: typeof pg }>('pg');
  // A pooler with no server connection left makes a client wait (PgBouncer: query_wait_timeout);
  // the probe's clients wait 5 s at most.
  const open = async () => {
    const client = new driver.Client({ connectionString: url, application_name: 'stowage-cli', connectionTimeoutMillis: 10_000, query_timeout: 5_000 });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };
  const pidOf = async (client: pg.Client) => (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const first = await open();
  const others: pg.Client[] = [];
  try {
    const pid = await pidOf(first);
    if ((first as unknown as { processID: number }).processID === pid) return { pooled: false };
    for (let i = 0; i < 4; i++) {
      const other = await open();
      others.push(other);
      try {
        await other.query('BEGIN');
      } catch (error) {
        // PgBouncer: "transaction blocks not allowed in statement pooling mode"
        if (/statement pool/i.test((error as Error).message)) return { pooled: true, mode: 'statement' };
        break; // no server connection for another client: ours stays ours
      }
      if ((await pidOf(other)) === pid) return { pooled: true, mode: 'transaction' };
    }
    return { pooled: true, mode: (await pidOf(first)) === pid ? 'session' : 'transaction' };
  } finally {
    await Promise.all([first, ...others].map((client) => client.end().catch(() => undefined)));
  }
}

async function poolerFindings(findings: Finding[], url: string, listenUrl: string | undefined): Promise<void> {
  const statements = await route(url);
  if (statements.pooled) {
    findings.push({
      severity: statements.mode === 'statement' ? 'error' : 'ok',
      check: 'pooler',
      message:
        statements.mode === 'statement'
          ? 'statements go through a pooler in statement mode: stowage runs transactions (adoption, process state changes, your transactions); use transaction mode'
          : `statements go through a pooler (PgBouncer) in ${statements.mode} mode: supported (every operation is one transaction; no session state)`,
    });
  }
  const listen = listenUrl === undefined ? statements : await route(listenUrl);
  const where = listenUrl === undefined ? 'the URL (no --listen-url)' : `--listen-url ${redactUrl(listenUrl)}`;
  if (listen.pooled) {
    findings.push({
      severity: 'error',
      check: 'LISTEN',
      message:
        `LISTEN is routed through a pooler in ${listen.mode} mode via ${where}: stowage detects it and sends no LISTEN, so lock hand-offs ` +
        'and process waits are never woken by NOTIFY and only poll. Give the stores listenUrl: a URL of the server itself (statements may stay on the pooler)',
    });
  } else {
    findings.push({ severity: 'ok', check: 'LISTEN', message: `${where} reaches the server's own session: wake-ups by LISTEN/NOTIFY work` });
  }
}

/** Every privilege `grantsSql()` of @stowage/postgres lists for the role, on the tables that exist. */
async function grantFindings(findings: Finding[], session: PgSession, role: string, input: DoctorInput): Promise<void> {
  const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const grants = adapter
    .grantsSql(role, { schema: input.schema, tables: input.names as never })
    .split('\n')
    .flatMap((line) => {
      const match = /^GRANT (.+) ON (TABLE|SEQUENCE|SCHEMA) (\S+) TO /.exec(line);
      return match ? match[1]!.split(', ').map((privilege) => ({ privilege, type: match[2]!, object: match[3]! })) : [];
    });
  const rows = await session.read<{ privilege: string; type: string; object: string; present: boolean | null }>(
    `SELECT g.privilege, g.type, g.object,
       CASE g.type
         WHEN 'SCHEMA' THEN CASE WHEN to_regnamespace(g.object) IS NOT NULL THEN has_schema_privilege(trim(both '"' from g.object), g.privilege) END
         WHEN 'TABLE' THEN CASE WHEN to_regclass(g.object) IS NOT NULL THEN has_table_privilege(g.object, g.privilege) END
         ELSE CASE WHEN to_regclass(g.object) IS NOT NULL THEN has_sequence_privilege(g.object, g.privilege) END
       END AS present
     FROM unnest($1::text[], $2::text[], $3::text[]) AS g(privilege, type, object)`,
    [grants.map((g) => g.privilege), grants.map((g) => g.type), grants.map((g) => g.object)],
  );
  const lacking = rows.filter((row) => row.present === false);
  const checked = rows.filter((row) => row.present !== null).length;
  for (const row of lacking) {
    findings.push({
      severity: 'error',
      check: 'privileges',
      message: `role ${role} lacks ${row.privilege} on ${row.type.toLowerCase()} ${row.object}: run as the owner: GRANT ${row.privilege} ON ${row.type} ${row.object} TO ${adapter.quoteIdentifier(role)} (grantsSql() lists them all)`,
    });
  }
  if (lacking.length === 0) findings.push({ severity: 'ok', check: 'privileges', message: `role ${role} has the ${checked} privilege(s) grantsSql() lists on the objects that exist` });
  const [schema] = await session.read<{ can_create: boolean; name: string }>(
    // A schema that does not exist yet is created by the first store: that needs CREATE on the database.
    `SELECT CASE WHEN to_regnamespace(quote_ident(s.name)) IS NULL THEN has_database_privilege(current_database(), 'CREATE')
       ELSE has_schema_privilege(s.name, 'CREATE') END AS can_create, s.name
     FROM (SELECT coalesce($1, current_schema()) AS name) AS s`,
    [input.schema ?? null],
  );
  const missingTables = new Set(rows.filter((row) => row.type === 'TABLE' && row.present === null).map((row) => row.object));
  if (missingTables.size > 0 && schema && !schema.can_create) {
    findings.push({
      severity: 'warn',
      check: 'privileges',
      message: `${missingTables.size} table(s) do not exist (${[...missingTables].join(', ')}) and role ${role} may not create them in schema ${schema.name}: a store on one fails at start; create them with schemaSql() as the owner, or pass autoCreate: false for stores you do not use`,
    });
  }
}

/** The existing tables stowage would adopt in place at a store's first start, or refuses (`planTableAdoption()` of @stowage/postgres). */
async function tableFindings(findings: Finding[], session: PgSession, schema: string | undefined): Promise<void> {
  for (const table of await readTables(session, await storeTables(session, schema))) {
    const { plan } = table;
    if (plan.verdict === 'awaitly' || plan.verdict === 'go-go-scope') {
      const by = plan.verdict === 'awaitly' ? 'the first store to start upgrades it in place' : 'goGoScopePersistence converts it in place when it first starts';
      findings.push({
        severity: table.ownedByUs ? 'warn' : 'error',
        check: 'adoption',
        message:
          `${table.name} is ${plan.layout} (about ${table.rows} rows), not adopted yet: ${by}` +
          (table.ownedByUs ? '' : ', which this role cannot (it does not own the table): a store started as this role fails') +
          `; \`stowage adopt --dry-run\` lists the changes, \`--apply${plan.verdict === 'go-go-scope' ? ' --key-prefix <keyPrefix>' : ''}\` makes them`,
      });
    } else if (plan.verdict === 'refused') {
      findings.push({ severity: 'error', check: 'layout', message: plan.reason });
    }
  }
}
