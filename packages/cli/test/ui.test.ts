import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { connect } from '@stowage/postgres';
import { findPostgresServer, isCI, type FoundBackend } from '@stowage/test-env';
import { snapshot, startUi, unique } from './support.js';

/*
 * `stowage ui` in a real browser: Debian's `chromium`, headless, loads the page the CLI serves
 * and the test reads what it shows (the DOM after the page's script ran) against data written
 * by the stores. Under CI=true a missing chromium fails the run (apt-get install chromium).
 */

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((path) => existsSync(path));
if (!CHROMIUM && isCI) throw new Error('no chromium: apt-get install chromium (CI=true: a missing browser fails the run)');

function chromium(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const profile = mkdtempSync(join(tmpdir(), 'stowage-cli-chromium-'));
    execFile(
      CHROMIUM!,
      ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', `--user-data-dir=${profile}`, ...args],
      { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout) => {
        rmSync(profile, { recursive: true, force: true });
        if (error) reject(error);
        else resolve(stdout);
      },
    );
  });
}

describe.runIf(CHROMIUM)('stowage ui in headless chromium', () => {
  let server: FoundBackend;
  let ui: { address: string; stop(): void } | undefined;
  let address: string;
  const schema = unique('cli_ui');

  beforeAll(async () => {
    server = (await findPostgresServer())!;
    const db = connect({ url: server.url, schema });
    const store = db.snapshots({ lock: true });
    await store.save('checkout-7', snapshot('running', ['reserve', 'charge'], 'ship'));
    await store.save('refund-2', snapshot('failed', ['lookup']));
    expect(await store.tryAcquire('checkout-7', { ttlMs: 600_000 })).not.toBeNull();
    await db.locks().acquire('nightly-report', 600_000, 'worker-a');
    for (let i = 0; i < 2; i++) await db.circuitBreaker().recordFailure('payments-api', 2, { cooldown: 60_000 });
    await db.close();
    ui = await startUi(['--url', server.url, '--schema', schema]);
    address = ui.address;
  });

  afterAll(async () => {
    ui?.stop();
    const client = new pg.Client(server.url);
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  it('shows workflows, locks with a live countdown and breakers; a workflow as a timeline of steps', async () => {
    // --virtual-time-budget lets the page's script run (its countdown) before the DOM is taken.
    const dom = await chromium(['--virtual-time-budget=2000', '--dump-dom', address]);
    expect(dom).toContain('data-script="ran"');
    const row = (id: string) => new RegExp(`<tr>(?:(?!</tr>).)*${id}(?:(?!</tr>).)*</tr>`).exec(dom)?.[0] ?? '';
    expect(row('checkout-7')).toMatch(/<td class="s-running">running<\/td><td>ship<\/td><td>2<\/td>/);
    // The lease and lock expiries were rewritten by the script: "9m 59s", never the server's "10m" text.
    expect(row('checkout-7')).toMatch(/\(<span data-expires-in="\d+(\.\d+)?">9m \d+s<\/span> left\)/);
    expect(row('refund-2')).toContain('<td class="s-failed">failed</td>');
    expect(row('nightly-report')).toMatch(/<td>worker-a<\/td><td>\d+<\/td><td data-expires-in="[\d.]+">9m \d+s<\/td><td>locks<\/td>/);
    expect(row('payments-api')).toMatch(/<td class="s-open">open<\/td><td>2<\/td>/);

    const timeline = await chromium(['--dump-dom', `${address}workflow?namespace=&id=checkout-7`]);
    expect(timeline).toMatch(/checkout-7: <span class="s-running">running<\/span>/);
    expect(timeline).toMatch(/<div class="step ok"><b>reserve<\/b><span>ok<\/span><code>\{"step":"reserve"\}<\/code><\/div>/);
    expect(timeline).toContain('current step: <b>ship</b>');
  });

  it('takes a screenshot; the server answers nothing but GET', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stowage-cli-shot-'));
    try {
      const file = join(dir, 'ui.png');
      await chromium([`--screenshot=${file}`, '--window-size=1100,700', address]);
      expect(readFileSync(file).subarray(1, 4).toString()).toBe('PNG');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const post = await fetch(address, { method: 'POST' });
    expect(post.status).toBe(405);
  });
});
