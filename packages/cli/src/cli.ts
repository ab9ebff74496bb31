#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { StowageError } from '@stowage/core';
import { openBackend, type OpenOptions } from './backend.js';
import { SECTIONS, decodeCursor, type Backend, type Finding, type InspectQuery, type Section } from './model.js';
import { parseDuration, print, printError, table } from './output.js';
import { COLUMNS } from './views.js';

const USAGE = `stowage — inspect, diagnose and adopt stowage's tables and collections

Usage:
  stowage inspect [workflows|locks|breakers|idempotency|processes|caches] [options]
  stowage inspect workflow <id> [--namespace <prefix>]               one workflow's steps
  stowage doctor [<url>] [--listen-url <url>]                        check a deployment
  stowage adopt [<url>] --dry-run | --apply [--yes] [--key-prefix p] awaitly / go-go-scope tables
  stowage ui [--port 4545]                                           read-only page on localhost

Connection:
  --url <url>            postgres://… or mongodb://… (default: $STOWAGE_URL)
  --schema <name>        PostgreSQL schema of the tables (the stores' \`schema\`)
  --db <name>            MongoDB database when the URL names none
  --table <kind>=<name>  a table / collection the stores were given another name
                         (kinds: snapshots, workflowLocks, locks, circuitBreaker, idempotency, kv, ...)

Adopt:
  --dry-run              list what adoption would change; changes nothing
  --apply                run the adapter's own adoption (asks first; --yes skips the question)
  --key-prefix <p>       go-go-scope's keyPrefix, under which its documents and rows are kept

Inspect:
  --prefix <text>        keys / workflow ids starting with <text> (literal)
  --namespace <prefix>   workflows of this store prefix only
  --kv                   workflows of createPostgresPersistence / createMongoPersistence (the
                         key-value table; --namespace is its prefix, default workflow:state:)
  --status <s>           workflows: running|completed|failed; locks: held (default)|expired|all;
                         breakers: closed|open|half-open; idempotency: in-flight|completed;
                         processes: a state
  --older-than <d>       not written (locks: acquired) for <d>: 500ms, 30s, 10m, 2h, 7d
  --limit <n>            rows per page (default 50)
  --after <cursor>       the next page (printed under a full page)
  --all                  every page, streamed (with --json: one JSON object per line)
  --json                 JSON for scripts

Exit codes: 0 fine, 1 doctor found an error (a promise of stowage would break), 2 bad usage or
no connection. Passwords in URLs are never printed.`;

const OPTIONS = {
  url: { type: 'string' },
  'listen-url': { type: 'string' },
  schema: { type: 'string' },
  db: { type: 'string' },
  table: { type: 'string', multiple: true },
  prefix: { type: 'string' },
  namespace: { type: 'string' },
  status: { type: 'string' },
  'older-than': { type: 'string' },
  limit: { type: 'string' },
  after: { type: 'string' },
  all: { type: 'boolean' },
  kv: { type: 'boolean' },
  json: { type: 'boolean' },
  'dry-run': { type: 'boolean' },
  'key-prefix': { type: 'string' },
  apply: { type: 'boolean' },
  yes: { type: 'boolean' },
  port: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function usageError(message: string): never {
  throw new StowageError('E_INVALID_OPTION', `${message} (stowage --help)`);
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  const [command, ...rest] = positionals;
  if (values.help || command === undefined || command === 'help') {
    print(USAGE);
    return 0;
  }
  switch (command) {
    case 'inspect':
      return withBackend(values, undefined, (backend) => inspect(backend, rest, values));
    case 'doctor':
      return withBackend(values, rest[0], (backend) => doctor(backend, values));
    case 'adopt':
      return withBackend(values, rest[0], (backend) => adopt(backend, values));
    case 'ui': {
      const port = values.port === undefined ? 4545 : Number(values.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535) usageError('--port must be a port number (0: any free one)');
      const { serve } = await import('./ui.js');
      return withBackend(values, undefined, (backend) => serve(backend, { port }));
    }
    default:
      return usageError(`unknown command ${JSON.stringify(command)}`);
  }
}

async function withBackend(values: Values, positionalUrl: string | undefined, run: (backend: Backend) => Promise<number>): Promise<number> {
  const url = positionalUrl ?? values.url ?? process.env.STOWAGE_URL;
  if (!url) usageError('no database: give --url or set STOWAGE_URL');
  const names: Record<string, string> = {};
  for (const entry of values.table ?? []) {
    const [kind, name] = entry.split('=');
    if (!kind || !name) usageError(`--table takes <kind>=<name>, got ${JSON.stringify(entry)}`);
    names[kind] = name;
  }
  const options: OpenOptions = { schema: values.schema, database: values.db, names, keyPrefix: values['key-prefix'] };
  const backend = await openBackend(url, options);
  try {
    return await run(backend);
  } finally {
    await backend.close();
  }
}

function inspectQuery(values: Values): InspectQuery {
  const limit = values.limit === undefined ? 50 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) usageError('--limit must be an integer from 1 to 10000');
  let olderThanMs: number | undefined;
  if (values['older-than'] !== undefined) {
    olderThanMs = parseDuration(values['older-than']);
    if (olderThanMs === undefined) usageError(`--older-than takes a duration such as 30s, 10m, 2h or 7d, got ${JSON.stringify(values['older-than'])}`);
  }
  decodeCursor(values.after); // a cursor that is none fails here, before anything is read
  return { prefix: values.prefix, namespace: values.namespace, status: values.status, olderThanMs, limit, cursor: values.after, kv: values.kv };
}

async function inspect(backend: Backend, args: string[], values: Values): Promise<number> {
  const [what = 'workflows', id] = args;
  if (what === 'workflow') {
    if (id === undefined) usageError('inspect workflow takes an id');
    if (values.kv) usageError('inspect workflow <id> reads a snapshot store; for --kv use inspect workflows --kv --prefix <id> --json');
    const snapshot = await backend.workflow(values.namespace ?? '', id);
    if (snapshot === null) {
      printError(`no workflow ${JSON.stringify(id)} under namespace ${JSON.stringify(values.namespace ?? '')}`);
      return 1;
    }
    print(values.json ? JSON.stringify(snapshot, null, 2) : stepsTable(snapshot));
    return 0;
  }
  if (!SECTIONS.includes(what as Section)) usageError(`inspect shows ${SECTIONS.join(', ')} or workflow <id>, not ${JSON.stringify(what)}`);
  const section = what as Section;
  if (section === 'locks' && values.status !== undefined && !['held', 'expired', 'all'].includes(values.status)) usageError('--status of locks: held, expired or all');
  const query = inspectQuery(values);
  for (let first = true; ; first = false) {
    const page = await backend.inspect(section, query);
    if (values.json && values.all) for (const item of page.items) print(JSON.stringify(item));
    else if (values.json) print(JSON.stringify(page, null, 2));
    else if (page.note !== undefined) print(page.note);
    else if (page.items.length > 0 || first) {
      const text = table(page.items, COLUMNS[section] as never);
      print(first ? text : text.slice(text.indexOf('\n') + 1));
    }
    if (!values.all || page.nextCursor === null) {
      if (!values.json && page.nextCursor !== null) print(`(more: --after ${page.nextCursor})`);
      return 0;
    }
    query.cursor = page.nextCursor;
  }
}

/** One workflow's steps: each step's outcome and its value or error, truncated to one line. */
function stepsTable(snapshot: unknown): string {
  const doc = snapshot as { execution?: { status?: string; currentStepId?: string }; steps?: Record<string, { ok?: boolean; value?: unknown; error?: unknown }> };
  const steps = Object.entries(doc.steps ?? {});
  const head = `status: ${doc.execution?.status ?? 'unknown'}${doc.execution?.currentStepId ? `, current step: ${doc.execution.currentStepId}` : ''}`;
  const rows = steps.map(([step, result]) => ({ step, ok: result?.ok === true, result: JSON.stringify(result?.ok ? result.value : result?.error) ?? '' }));
  return `${head}\n${table(rows, [
    { title: 'STEP', value: (row) => row.step },
    { title: 'OUTCOME', value: (row) => (row.ok ? 'ok' : 'failed') },
    { title: 'RESULT', value: (row) => row.result },
  ])}`;
}

const MARK: Record<Finding['severity'], string> = { ok: 'ok   ', info: 'info ', warn: 'WARN ', error: 'ERROR' };

async function doctor(backend: Backend, values: Values): Promise<number> {
  const findings = await backend.doctor({ listenUrl: values['listen-url'] });
  if (values.json) print(JSON.stringify(findings, null, 2));
  else for (const finding of findings) print(`${MARK[finding.severity]} ${finding.check}: ${finding.message}`);
  return findings.some((finding) => finding.severity === 'error') ? 1 : 0;
}

async function adopt(backend: Backend, values: Values): Promise<number> {
  if (values['dry-run'] === values.apply) usageError('adopt takes exactly one of --dry-run and --apply');
  const plan = await backend.adoptionPlan();
  if (values.json) print(JSON.stringify(plan, null, 2));
  else if (plan.length === 0) print('nothing to adopt: no awaitly or go-go-scope tables/collections of a layout stowage would change');
  else {
    for (const item of plan) {
      print(`${item.name}: ${item.layout}, about ${item.rows} row(s)`);
      for (const change of item.changes) print(`  - ${change}`);
      if (item.refused) print(`  REFUSED: ${item.refused}`);
    }
  }
  if (values['dry-run'] || plan.length === 0) return plan.some((item) => item.refused) ? 1 : 0;
  if (plan.some((item) => item.refused)) {
    printError('not applying: stowage refuses a layout above; nothing was changed');
    return 1;
  }
  if (!values.yes) {
    const { createInterface } = await import('node:readline/promises');
    const prompt = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await prompt.question('Apply these changes? Type "yes": ');
    prompt.close();
    if (answer.trim() !== 'yes') {
      printError('not applied');
      return 1;
    }
  }
  await backend.adopt(plan, (line) => printError(line));
  print('adopted');
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    const code = error instanceof StowageError ? `${error.code}: ` : '';
    const cause = (error as { cause?: unknown }).cause;
    printError(`stowage: ${code}${(error as Error)?.message ?? String(error)}${cause instanceof Error ? ` (${cause.message})` : ''}`);
    if (process.env.STOWAGE_DEBUG) printError(String((error as Error)?.stack));
    process.exitCode = 2;
  },
);
