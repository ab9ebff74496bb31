import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** The built CLI (`pnpm test` builds it first: see turbo.json). */
export const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `stowage …args` as a child process, as a user would; never rejects. */
export function stowage(args: string[], options: { env?: Record<string, string>; input?: string } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, STOWAGE_URL: '', ...options.env }, timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    if (options.input !== undefined) child.stdin!.end(options.input);
  });
}

/** A name no other test run uses (schemas, collections, roles). */
export function unique(prefix: string): string {
  return `${prefix}_${randomUUID().slice(0, 8)}`;
}

/** An awaitly `WorkflowSnapshot`: `steps` done, then `current`. */
export function snapshot(status: 'running' | 'completed' | 'failed', steps: string[], current?: string) {
  return {
    formatVersion: 1 as const,
    steps: Object.fromEntries(steps.map((step) => [step, { ok: true as const, value: { step } }])),
    execution: { status, lastUpdated: new Date().toISOString(), ...(current ? { currentStepId: current } : {}) },
  };
}

/** `stowage ui …args --port 0` as a child process: the address it serves, and how to stop it. */
export async function startUi(args: string[]): Promise<{ address: string; stop(): void }> {
  const ui = spawn(process.execPath, [CLI, 'ui', ...args, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const address = await new Promise<string>((resolve, reject) => {
    createInterface({ input: ui.stdout }).once('line', (line) => resolve(/(http:\/\/\S+)/.exec(line)![1]!));
    ui.once('exit', (code) => reject(new Error(`stowage ui exited with ${code}`)));
  });
  return { address, stop: () => ui.kill('SIGTERM') };
}
