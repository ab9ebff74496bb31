/**
 * Other Node.js versions for the tests that prove what the READMEs claim about them: the
 * `node` package from the npm registry (the same way `.ci/run` gets Node 24), installed once
 * into the CI cache (`STOWAGE_CACHE`, default ~/.cache/stowage) and reused by later runs.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The oldest Node.js that `engines` (">=22") admits: the packed packages must run on it. */
export const OLDEST_NODE = '22.0.0';

export async function nodeBinary(version: string): Promise<string> {
  const prefix = join(process.env.STOWAGE_CACHE ?? join(homedir(), '.cache', 'stowage'), `node-${version}`);
  const binary = join(prefix, 'node_modules', '.bin', 'node');
  if (!existsSync(binary)) {
    await run('npm', ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error', `node@${version}`], {
      env: { ...process.env, npm_config_update_notifier: 'false' },
    });
  }
  const { stdout } = await run(binary, ['--version']);
  if (stdout.trim() !== `v${version}`) throw new Error(`${binary} is ${stdout.trim()}, not v${version}`);
  return binary;
}
