/** What a worker process and the demo tell each other over the IPC channel. */
export type WorkerMessage =
  /** Sent by the worker chosen to be paused, while it holds the lock and before it writes. */
  | { type: 'holding'; fence: number; valueRead: number }
  | { type: 'done'; written: number; rejected: number; leaseLost: number };

/** The demo's answer to `holding`: go on and write. */
export type DemoMessage = { type: 'continue' };

/** How long a lease lasts unless extended; withLock extends it every third of that. */
export const LEASE_MS = 1_500;
