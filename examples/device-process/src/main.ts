/**
 * The device process across several OS processes, with a crash:
 *
 * 1. Picks the database: DATABASE_URL or STOWAGE_POSTGRES_URL, else an embedded PostgreSQL
 *    (PGlite in its own process, served over TCP, reached with the real `pg` driver).
 * 2. Starts half of the devices, then one worker process per state (two for `downloading`),
 *    then the other half.
 * 3. Once `downloading-0` has saved its cursor, SIGKILLs it the moment it begins downloading
 *    for a device, and restarts it under the same name: it resumes from its cursor; what it
 *    held is retried after its lease.
 * 4. Waits until every device is done, stops the workers with SIGTERM, and checks the
 *    invariants. Exits 1 if any fails.
 *
 * `node src/main.ts [devices]` (default 24).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bindProcess, type ProcessItem } from '@stowage/core';
import { createPostgresProcessBackend, quoteIdentifier } from '@stowage/postgres';
import { startEmbeddedPostgres } from '@stowage/test-env';
import pg from 'pg';
import { DEVICE_STATES, DeviceEffects, deviceProcess, tableNames, type Device, type DeviceState } from './device-process.ts';
import type { WorkerLine } from './protocol.ts';

const DEVICES = Number(process.argv[2] ?? 24);
const TIMEOUT = 120_000;
const WORKER_SCRIPT = fileURLToPath(new URL('./worker.ts', import.meta.url));

const givenUrl = process.env.DATABASE_URL ?? process.env.STOWAGE_POSTGRES_URL;
const embedded = givenUrl ? null : await startEmbeddedPostgres({ separateProcess: true, maxConnections: 48 });
const url = givenUrl ?? embedded!.url;
console.log(`database: ${embedded ? embedded.label : 'PostgreSQL server from DATABASE_URL / STOWAGE_POSTGRES_URL'}`);

const run = randomBytes(4).toString('hex');
const tables = tableNames(run);
const pool = new pg.Pool({ connectionString: url, max: 3 });
const effects = new DeviceEffects(pool, tables.effects);
await effects.createTable();
const backend = createPostgresProcessBackend({ url, pool: { max: 2 }, itemsTable: tables.items, transitionsTable: tables.transitions });
await backend.ready();
const downgrades = bindProcess(backend, deviceProcess(effects));
console.log(`feeds: ${backend.capabilities.changeFeed ? 'woken by LISTEN/NOTIFY' : 'polling (LISTEN is not available here)'}\n`);

// --- Worker processes -----------------------------------------------------------------

interface WorkerProcess {
  name: string;
  child: ChildProcess;
  ready: Promise<void>;
  exited: Promise<number | null>;
  /** Devices (state + id) whose handler began here and whose outcome was not written yet. */
  open: Set<string>;
  onBegin?: (device: string) => void;
  /** Resolves when the worker has saved a cursor. */
  cursorSaved: Promise<void>;
}

const workers = new Map<string, WorkerProcess>();
const calls = new Map<string, number>(); // "state device" -> handler calls
const rerunsExpected = new Map<string, number>(); // "state device" -> waits and retries
const resumedFeeds: { worker: string; state: string; resumed: boolean }[] = [];
const stay = (state: string, device: string) => `${state} ${device}`;

function launch(name: string, states: DeviceState[]): WorkerProcess {
  const child = spawn(process.execPath, [WORKER_SCRIPT, name, ...states], {
    env: { ...process.env, DATABASE_URL: url, RUN_ID: run },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let markReady!: () => void;
  let markCursorSaved!: () => void;
  const worker: WorkerProcess = {
    name,
    child,
    ready: new Promise((resolve) => (markReady = resolve)),
    // 'close' fires after stdout was read to the end: no line printed before a SIGKILL is missed.
    exited: new Promise((resolve) => child.once('close', (code) => resolve(code))),
    open: new Set(),
    cursorSaved: new Promise((resolve) => (markCursorSaved = resolve)),
  };
  createInterface({ input: child.stdout! }).on('line', (text) => {
    const line = JSON.parse(text) as WorkerLine;
    switch (line.t) {
      case 'ready':
        markReady();
        break;
      case 'feed':
        resumedFeeds.push({ worker: name, state: line.state, resumed: line.resumed });
        console.log(`  ${name}: feed of "${line.state}" ${line.resumed ? `resumed after ${line.position}` : 'starts now (scanning what waits)'}`);
        break;
      case 'call':
        calls.set(stay(line.state, line.device), (calls.get(stay(line.state, line.device)) ?? 0) + 1);
        worker.open.add(stay(line.state, line.device));
        worker.onBegin?.(line.device);
        break;
      case 'event':
        worker.open.delete(stay(line.state, line.device));
        if (line.type === 'waiting' || line.type === 'retry') {
          rerunsExpected.set(stay(line.state, line.device), (rerunsExpected.get(stay(line.state, line.device)) ?? 0) + 1);
        }
        if (line.type !== 'advanced') console.log(`  ${name}: ${line.device} ${line.type} in "${line.state}" ${line.detail}`);
        break;
      case 'cursor':
        markCursorSaved();
        break;
      case 'stopped':
        console.log(`  ${name}: stopped (${line.handedBack} handed back)`);
        break;
    }
  });
  workers.set(name, worker);
  return worker;
}

const layout: [string, DeviceState[]][] = [
  ['started-0', ['started']],
  ['downloading-0', ['downloading']],
  ['downloading-1', ['downloading']],
  ['installing-0', ['installing']],
  ['rebooting-0', ['rebooting']],
  ['verifying-0', ['verifying']],
];

const deadline = Date.now() + TIMEOUT;
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`gave up waiting until ${what}`)), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

const devices = Array.from({ length: DEVICES }, (_, i) => `device-${String(i).padStart(2, '0')}`);
const start = (id: string) => downgrades.start(id, { user: `user-${id.slice(-2)}`, firmware: '1.4.2' } satisfies Device);
let killedHeld: string[] = [];
let exitCode = 0;

try {
  const firstHalf = devices.slice(0, DEVICES / 2);
  for (const id of firstHalf) await start(id);
  console.log(`started ${firstHalf.length} downgrades; starting ${layout.length} worker processes`);
  await within(Promise.all(layout.map(([name, states]) => launch(name, states).ready)), 'every worker is ready');
  for (const id of devices.slice(DEVICES / 2)) await start(id);
  console.log(`started ${DEVICES - firstHalf.length} more downgrades while the workers run\n`);

  // The crash: once downloading-0 has saved a cursor, SIGKILL it the moment it begins a
  // download, then restart it.
  const victim = workers.get('downloading-0')!;
  await within(victim.cursorSaved, 'downloading-0 saved its cursor');
  const begun = await within(new Promise<string>((resolve) => (victim.onBegin = resolve)), 'downloading-0 begins a download');
  victim.child.kill('SIGKILL');
  await within(victim.exited, 'downloading-0 died');
  killedHeld = [...victim.open];
  console.log(`\n*** SIGKILL downloading-0 while downloading for ${begun}; it held: ${killedHeld.join(', ') || 'nothing unfinished'}`);
  await within(launch('downloading-0', ['downloading']).ready, 'downloading-0 restarted');
  console.log('*** downloading-0 restarted under the same name\n');

  const allDone = async () => {
    for (;;) {
      const finished = await Promise.all(devices.map((id) => downgrades.get(id)));
      if (finished.every((item) => item?.state === 'done' || item?.state === 'failed')) return finished as ProcessItem<Device>[];
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const finished = await within(allDone(), 'every device finished');
  console.log(`\nall ${finished.length} devices finished; stopping the workers with SIGTERM`);
  for (const worker of workers.values()) worker.child.kill('SIGTERM');
  const exits = await within(Promise.all([...workers.values()].map((worker) => worker.exited)), 'the workers exited');

  // --- The invariants -------------------------------------------------------------------
  const checks: [string, boolean][] = [];
  const check = (what: string, ok: boolean) => checks.push([what, ok]);
  const expectedPath = [...DEVICE_STATES, 'done'];
  check(`every device is done (${finished.filter((item) => item.state === 'done').length}/${DEVICES})`, finished.every((item) => item.state === 'done'));
  let wrongHistories = 0;
  for (const id of devices) {
    const history = await downgrades.history(id);
    const path = history.map((entry) => entry.to);
    const versionsInOrder = history.every((entry, index) => entry.version === index + 1 && (index === 0 || entry.from === history[index - 1]!.to));
    if (path.join() !== expectedPath.join() || !versionsInOrder) wrongHistories++;
  }
  check(`every history is ${expectedPath.join(' -> ')}: no state entered or left twice, done exactly once`, wrongHistories === 0);
  const effectCounts = await effects.counts();
  check(
    `every side effect ran exactly once per device and step (${effectCounts.length} effects)`,
    effectCounts.length === DEVICES * DEVICE_STATES.length && effectCounts.every((row) => row.count === 1),
  );
  const redeliveries = [...calls].flatMap(([key, count]) => {
    const extra = count - 1 - (rerunsExpected.get(key) ?? 0);
    return extra > 0 ? [{ key, extra }] : [];
  });
  const redelivered = redeliveries.reduce((sum, entry) => sum + entry.extra, 0);
  check(
    `handlers saw a redelivery only for what the killed worker held (${redelivered} redelivered: ${redeliveries.map((entry) => entry.key).join(', ') || 'none'})`,
    redeliveries.every((entry) => killedHeld.includes(entry.key) && entry.extra === 1),
  );
  check('the restarted downloading-0 resumed from its cursor', resumedFeeds.filter((feed) => feed.worker === 'downloading-0').at(-1)?.resumed === true);
  check('every worker exited cleanly after SIGTERM', exits.every((code) => code === 0));
  const waits = [...rerunsExpected].length;
  console.log(`\nfigures: ${DEVICES} devices, 1 kill, ${killedHeld.length} in flight at the kill, ${redelivered} redelivered to a handler, ${waits} stays with a wait or retry`);
  for (const [what, ok] of checks) console.log(`${ok ? '✓' : '✗'} ${what}`);
  const failed = checks.filter(([, ok]) => !ok).length;
  console.log(failed === 0 ? `\nAll ${checks.length} checks passed` : `\n${failed} of ${checks.length} checks FAILED`);
  if (failed > 0) exitCode = 1;
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  for (const worker of workers.values()) if (worker.child.exitCode === null) worker.child.kill('SIGKILL');
  await backend.close();
  if (givenUrl) {
    await pool.query(Object.values(tables).map((table) => `DROP TABLE IF EXISTS ${quoteIdentifier(table)}`).join(';\n')).catch(() => undefined);
  }
  await pool.end();
  await embedded?.stop();
}
process.exit(exitCode);
