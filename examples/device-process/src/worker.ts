/**
 * One worker OS process, like one of the seed's StatefulSets: `node src/worker.ts <name> <state>…`
 * with DATABASE_URL and RUN_ID set. Runs the given states until SIGTERM/SIGINT, then stops
 * gracefully (finishes or hands back its items, saves its cursors). Its name is its identity:
 * restarted under the same name, it resumes from its cursors.
 */
import { bindProcess } from '@stowage/core';
import { PostgresKeyValueStore, createPostgresProcessBackend } from '@stowage/postgres';
import pg from 'pg';
import { DeviceEffects, deviceProcess, tableNames, type DeviceState } from './device-process.ts';
import type { WorkerLine } from './protocol.ts';

const [name, ...states] = process.argv.slice(2) as [string, ...DeviceState[]];
const url = process.env.DATABASE_URL!;
const tables = tableNames(process.env.RUN_ID!);
// stdout on a pipe is synchronous: a line printed before a SIGKILL is never lost.
const print = (line: WorkerLine) => process.stdout.write(`${JSON.stringify(line)}\n`);

const pool = new pg.Pool({ connectionString: url, max: 2 });
const backend = createPostgresProcessBackend({ url, pool: { max: 3 }, itemsTable: tables.items, transitionsTable: tables.transitions });
const cursors = new PostgresKeyValueStore({ url, pool: { max: 1 }, table: tables.cursors });
const effects = new DeviceEffects(pool, tables.effects);
const definition = deviceProcess(effects, (call) => print({ t: 'call', worker: name, ...call }));

const worker = bindProcess(backend, definition).worker({
  name,
  states,
  cursors,
  pollInterval: 250,
  cursorInterval: 200,
  onEvent: (event) => {
    switch (event.type) {
      case 'feed-opened':
        print({ t: 'feed', worker: name, state: event.state, resumed: event.resumed, position: event.position });
        break;
      case 'advanced':
        print({ t: 'event', worker: name, type: event.type, device: event.itemId, state: event.state, detail: `-> ${event.to}` });
        break;
      case 'retry':
        print({ t: 'event', worker: name, type: event.type, device: event.itemId, state: event.state, detail: `attempt ${event.attempt} failed (${event.error}); again in ${event.delay} ms` });
        break;
      case 'waiting':
        print({ t: 'event', worker: name, type: event.type, device: event.itemId, state: event.state, detail: `check again in ${event.delay} ms` });
        break;
      case 'dead-lettered':
      case 'conflict':
      case 'handed-back':
        print({ t: 'event', worker: name, type: event.type, device: event.itemId, state: event.state, detail: '' });
        break;
      case 'error':
        process.stderr.write(`[${name}] ${event.during}: ${String(event.error)}\n`);
        break;
      case 'cursor-saved':
        print({ t: 'cursor', worker: name, state: event.state, position: event.position });
        break;
      case 'stopped':
        print({ t: 'stopped', worker: name, handedBack: event.handedBack });
        break;
    }
  },
});

// run() installs the SIGTERM/SIGINT handlers as soon as the feeds are open, before "ready" is printed.
const running = worker.run();
await worker.start();
print({ t: 'ready', worker: name, pid: process.pid });
await running;
await Promise.all([backend.close(), cursors.close(), pool.end()]);
