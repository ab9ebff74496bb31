/**
 * Running a role (a piece of a check that plays one client) either as an OS process — one
 * `node` per worker, opening its own connections, as separate application servers would — or,
 * for the in-memory backend, as concurrent async tasks in this process.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Backend, BackendTarget } from './backends/types.ts';

export interface RoleContext {
  /** 0-based index of this worker among those started together. */
  index: number;
  /** Sends a progress event to the parent (IPC for processes, a callback in-process). */
  emit(event: unknown): void;
  /**
   * Resolves once the parent has sent `word` ({@link WorkerProcess.tell}): how a role that runs
   * until told learns to stop. In-process roles are never told anything.
   */
  told(word: string): Promise<void>;
}

export type Role<P = unknown, R = unknown> = (backend: Backend, params: P, context: RoleContext) => Promise<R>;

/**
 * The roles a worker process can play, by name. role-table.ts maps each to the check that
 * defines it (loaded lazily in the worker process); the checks import this module, never the
 * table, so the worker machinery does not depend on the checks it runs.
 */
export type RoleName =
  | 'lock-contender'
  | 'cas-writer'
  | 'lock-holder'
  | 'snapshot-writer'
  | 'charger'
  | 'leak-cycles'
  | 'hostile-corpus'
  | 'connections-client'
  | 'failover-load';

export interface WorkerRequest {
  role: RoleName;
  target: BackendTarget;
  params: unknown;
  index: number;
}

/** From the parent to a running worker. */
export interface ParentMessage {
  type: 'tell';
  word: string;
}

export type WorkerMessage =
  | { type: 'event'; event: unknown }
  | { type: 'done'; result: unknown }
  | { type: 'failed'; error: string };

const WORKER_FILE = fileURLToPath(new URL('./worker.ts', import.meta.url));

export class WorkerProcess<R> {
  readonly child: ChildProcess;
  /** Settles with the role's result, or rejects when the worker fails, dies or overruns `hardLimitMs`. */
  readonly result: Promise<R>;
  /** Resolves with the exit code/signal once the process is gone. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the process is gone and every message it sent has been delivered. */
  readonly closed: Promise<void>;
  #timer: NodeJS.Timeout;

  constructor(request: WorkerRequest, onEvent: (event: unknown) => void, hardLimitMs: number) {
    this.child = fork(WORKER_FILE, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.exited = new Promise((resolve) => this.child.once('exit', (code, signal) => resolve({ code, signal })));
    this.closed = new Promise((resolve) => this.child.once('close', () => resolve()));
    this.result = new Promise<R>((resolve, reject) => {
      this.child.on('message', (message: WorkerMessage) => {
        if (message.type === 'event') onEvent(message.event);
        else if (message.type === 'done') resolve(message.result as R);
        else reject(new Error(`worker ${request.role}#${request.index} failed: ${message.error}`));
      });
      void this.exited.then(({ code, signal }) =>
        reject(new Error(`worker ${request.role}#${request.index} exited (code ${code}, signal ${signal}) before finishing`)),
      );
    });
    this.result.catch(() => undefined);
    this.#timer = setTimeout(() => this.kill('SIGKILL'), hardLimitMs);
    void this.exited.then(() => clearTimeout(this.#timer));
    this.child.send(request);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Sends `word` to the role (see {@link RoleContext.told}); nothing when the process is gone. */
  tell(word: string): void {
    if (this.child.connected) this.child.send({ type: 'tell', word } satisfies ParentMessage);
  }

  kill(signal: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }

  /** Waits up to `ms` for the process to exit on its own; kills it and returns false otherwise. */
  async exitsWithin(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
    const exited = await Promise.race([this.exited.then(() => true as const), timedOut]);
    clearTimeout(timer);
    if (!exited) {
      this.kill('SIGKILL');
      await this.exited;
    }
    return exited;
  }
}

export function startWorker<R>(
  target: BackendTarget,
  role: RoleName,
  params: unknown,
  options: { index?: number; onEvent?: (event: unknown) => void; hardLimitMs: number },
): WorkerProcess<R> {
  return new WorkerProcess<R>({ role, target, params, index: options.index ?? 0 }, options.onEvent ?? (() => {}), options.hardLimitMs);
}

/**
 * Runs `count` copies of a role at once and returns their results. Cross-process backends get
 * one OS process per copy, which loads the role named `role` from the role table; the
 * in-memory backend gets async tasks sharing `backend`, each calling `run` (the same role's
 * function, which the calling check defines).
 */
export async function runWorkers<P, R>(
  backend: Backend,
  role: RoleName,
  run: Role<P, R>,
  count: number,
  params: (index: number) => P,
  options: { hardLimitMs: number; onEvent?: (index: number, event: unknown) => void },
): Promise<R[]> {
  if (!backend.crossProcess) {
    return Promise.all(
      Array.from({ length: count }, (_, index) =>
        run(backend, params(index), { index, emit: (event) => options.onEvent?.(index, event), told: () => new Promise(() => {}) }),
      ),
    );
  }
  const workers = Array.from({ length: count }, (_, index) =>
    startWorker<R>(backend.target, role, params(index), {
      index,
      hardLimitMs: options.hardLimitMs,
      onEvent: (event) => options.onEvent?.(index, event),
    }),
  );
  try {
    return await Promise.all(workers.map((worker) => worker.result));
  } catch (error) {
    for (const worker of workers) worker.kill('SIGKILL');
    throw error;
  } finally {
    for (const worker of workers) await worker.exitsWithin(10_000);
  }
}
