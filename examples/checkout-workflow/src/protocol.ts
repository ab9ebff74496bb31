/** What a worker process tells the demo over the IPC channel. */
export type WorkerMessage =
  | { type: 'ready' }
  /** In the race: got the lease and waits in fetch-user for `proceed`. */
  | { type: 'holding' }
  | { type: 'finished'; outcome: 'completed'; order: unknown }
  | { type: 'finished'; outcome: 'locked-out'; message: string }
  | { type: 'finished'; outcome: 'failed'; error: string };

/** What the demo tells a racing worker: start the run, or finish fetch-user. */
export type DemoMessage = 'go' | 'proceed';

/** The exit code of a worker that crashed on purpose. */
export const CRASH_EXIT_CODE = 75;
