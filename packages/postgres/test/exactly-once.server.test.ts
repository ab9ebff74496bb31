import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { PostgresIdempotencyStore, PostgresKeyValueStore } from '../src/index.js';
import { serverTestSetup } from './support/server.js';

/**
 * Exactly once for database effects: a process charging keys with `runOnce` is SIGKILLed again
 * and again, at random moments (many of them between a key's effect and its completion), and
 * restarted until it has charged every key. Counted afterwards: every key's effect applied
 * exactly once (0 twice, 0 lost), and every key completed.
 *
 * The PostgreSQL server only: PGlite is one session inside one process, so a second OS process
 * cannot share its database, and a SIGKILL would kill the database with the writer.
 */
const { url, describeServer, freshTables } = await serverTestSetup({ max: 1 });

describeServer('runOnce under SIGKILL (PostgreSQL server)', () => {
  const tables = freshTables();

  test('a writer killed 12 times while charging: every effect applied exactly once, none lost', { timeout: 120_000 }, async () => {
    const keys = 400;
    const worker = fileURLToPath(new URL('./support/run-once-worker.ts', import.meta.url));
    let kills = 0;
    for (let run = 0; ; run++) {
      expect(run, 'runs before every key was charged').toBeLessThan(60);
      const child = spawn(process.execPath, [worker], {
        env: { ...process.env, STOWAGE_WORKER_URL: url, STOWAGE_WORKER_TABLES: JSON.stringify(tables), STOWAGE_WORKER_KEYS: String(keys) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      let progress = 0;
      child.stderr.on('data', (chunk) => (stderr += chunk));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      // Kill after a few keys, at a random point inside a key (each key pauses 5 ms between
      // its effect and its commit), until 12 kills landed; then let the last run finish.
      const target = kills < 12 ? 3 + Math.floor(Math.random() * 20) : Infinity;
      await new Promise<void>((resolve) => {
        child.stdout.on('data', (chunk: Buffer) => {
          progress += chunk.toString().split('progress').length - 1;
          if (progress >= target && child.exitCode === null) {
            setTimeout(() => {
              child.kill('SIGKILL');
              resolve();
            }, Math.random() * 6);
          }
        });
        void exited.then(() => resolve());
      });
      const code = await exited;
      if (code === 0) break;
      expect(child.signalCode, stderr).toBe('SIGKILL');
      kills++;
    }
    expect(kills).toBeGreaterThanOrEqual(12);

    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const idempotency = new PostgresIdempotencyStore({ url, table: tables.idempotency });
    const perKey = new Map<string, number>();
    for (const key of await kv.keys('effect/*')) {
      const charged = key.split('/')[1]!;
      perKey.set(charged, (perKey.get(charged) ?? 0) + 1);
    }
    const twice = [...perKey].filter(([, count]) => count > 1);
    const lost = Array.from({ length: keys }, (_, key) => String(key)).filter((key) => !perKey.has(key));
    const notCompleted: number[] = [];
    for (let key = 0; key < keys; key++) if ((await idempotency.get(`charge/${key}`)) === null) notCompleted.push(key);
    console.log(`[stowage postgres] runOnce under SIGKILL: ${kills} kills, ${keys} keys; applied twice ${twice.length}, lost ${lost.length}, not completed ${notCompleted.length}`);
    expect({ twice, lost, notCompleted }).toEqual({ twice: [], lost: [], notCompleted: [] });
    await Promise.all([kv.close(), idempotency.close()]);
  });
});
