/**
 * What a worker (worker.ts), its state runners and their tasks (task.ts) share, in a module of
 * its own so that a task depends on the settings and not on the worker that runs it.
 */
import type { KeyValueStore } from '../contracts/kv.js';
import type { ProcessBackend, ProcessDefinition, ProcessEvent } from '../contracts/process.js';

export interface WorkerSettings {
  name: string;
  /** Unique per incarnation: a restarted worker with the same name never shares claims with its predecessor. */
  owner: string;
  backend: ProcessBackend;
  definition: ProcessDefinition;
  cursors: KeyValueStore;
  cursorPrefix: string;
  pollInterval: number;
  recoveryInterval: number;
  unclaimedAfter: number;
  shutdownTimeout: number;
  emit(event: ProcessEvent): void;
  /** Aborts when the worker begins to stop: no more claims. */
  stopping: AbortSignal;
  /** Aborts when running handlers are out of time: their items are handed back. */
  outOfTime: AbortSignal;
}
