/**
 * `pgbench -M prepared` with a custom script, as the physical anchor of a point read: the
 * server's own benchmark client (C, libpq, a prepared statement per connection, one client per
 * call in flight) reading the same table with the same key distribution as stowage. Its rate
 * is what the server can do for one-key statements; stowage can only beat it by sending fewer
 * statements (coalescing).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Impl, ThroughputSample } from './types.ts';

export interface PgbenchOptions {
  url: string;
  /** The statement, with `:k` for the key (drawn by `\set k random(1, rows)`). */
  statement: string;
  rows: number;
  /** Threads of pgbench itself (`-j`). */
  threads: number;
  /** At most this many clients (a server that cannot take more connections says so). */
  maxClients?: number;
  applicationName: string;
}

/** Length of one pgbench run (its throughput slices and warm-up). */
const SECONDS = 1;

interface PgbenchRun {
  transactions: number;
  tps: number;
  stdout: string;
}

async function run(args: string[], applicationName: string): Promise<PgbenchRun> {
  const child = spawn('pgbench', args, { env: { ...process.env, PGAPPNAME: applicationName }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
  const processed = /number of transactions actually processed: (\d+)/.exec(stdout);
  const failed = /number of failed transactions: (\d+)/.exec(stdout);
  if (code !== 0 || tps === null || processed === null) {
    throw new Error(`pgbench exited with ${code}: ${(stderr || stdout).trim().split('\n').slice(-2).join(' ')}`);
  }
  if (failed !== null && Number(failed[1]) > 0) throw new Error(`pgbench: ${failed[1]} failed transactions`);
  return { transactions: Number(processed[1]), tps: Number(tps[1]), stdout };
}

/** The anchor as an implementation: throughput from pgbench runs, latency from one client's per-transaction log. */
const scriptDirs: string[] = [];

/** Removes the scripts and logs of every pgbench implementation made so far. */
export async function removePgbenchFiles(): Promise<void> {
  for (const dir of scriptDirs.splice(0)) await rm(dir, { recursive: true, force: true });
}

export async function pgbenchImpl(name: string, options: PgbenchOptions, target: number | null): Promise<Impl> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'stowage-pgbench-'));
  scriptDirs.push(dir);
  const script = path.join(dir, 'script.sql');
  await writeFile(script, `\\set k random(1, ${options.rows})\n${options.statement};\n`);
  const base = ['-n', '-M', 'prepared', '-f', script];
  return {
    name,
    kind: 'anchor',
    target,
    knownRoundTrips: 1,
    run: () => Promise.reject(new Error('pgbench runs as a program of its own')),
    // `count` is ignored: pgbench runs for whole seconds (-T). A run of a fixed number of
    // transactions per client (-t) under-reports short runs: clients that finish early leave
    // fewer in flight for the rest of the run (at 300 per client, 15% less than at 1000).
    async batch(_count: number, concurrency: number): Promise<ThroughputSample> {
      const clients = Math.min(concurrency, options.maxClients ?? concurrency);
      const threads = Math.min(options.threads, clients);
      const result = await run([...base, '-c', String(clients), '-j', String(threads), '-T', String(SECONDS), options.url], options.applicationName);
      // pgbench's rate leaves out its connection set-up, as the pools of the others are open already
      return { ops: result.transactions, elapsedMs: (result.transactions / result.tps) * 1000, opsPerSec: result.tps, cpuMicrosPerOp: Number.NaN };
    },
    async sequential(count: number): Promise<number[]> {
      const prefix = path.join(dir, `log${Date.now()}`);
      await run([...base, '-c', '1', '-j', '1', '-t', String(count), '-l', `--log-prefix=${prefix}`, options.url], options.applicationName);
      const samples: number[] = [];
      for (const file of (await readdir(dir)).filter((f) => path.join(dir, f).startsWith(prefix))) {
        // client_id transaction_no time script_no time_epoch time_us: `time` is the latency in µs
        for (const line of (await readFile(path.join(dir, file), 'utf8')).split('\n')) {
          const fields = line.split(' ');
          if (fields.length >= 3) samples.push(Number(fields[2]) / 1000);
        }
        await rm(path.join(dir, file));
      }
      return samples;
    },
  };
}

/** Whether the pgbench binary is on PATH (its version line, or null). */
export async function pgbenchVersion(): Promise<string | null> {
  return new Promise((resolve) => {
    const child = spawn('pgbench', ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', () => resolve(null));
    child.once('close', (code) => resolve(code === 0 ? out.trim() : null));
  });
}
