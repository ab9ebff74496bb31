import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface ChildBackend {
  url: string;
  label: string;
  stop(): Promise<void>;
}

/** Starts PGlite (test-env's startEmbeddedPostgres) in a child process; see pglite-child.ts. */
export async function startPgliteProcess(): Promise<ChildBackend> {
  const script = fileURLToPath(new URL('../pglite-child.ts', import.meta.url));
  const child: ChildProcess = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: [] });
  const info = await new Promise<{ url: string; label: string }>((resolve, reject) => {
    child.once('message', (message) => resolve(message as { url: string; label: string }));
    child.once('exit', (code) => reject(new Error(`PGlite process exited early with code ${code}`)));
    child.once('error', reject);
  });
  return {
    url: info.url,
    label: `${info.label} (own process, pid ${child.pid})`,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
