/**
 * Entry point of a worker process: receives one request over IPC, opens the backend, runs the
 * role, reports the result and then lets the process end by itself (nothing keeps it alive
 * unless stowage left a connection, timer or listener behind).
 */
import { openBackend } from './backends/index.ts';
import { describeError } from './report.ts';
import { ROLES } from './role-table.ts';
import type { ParentMessage, WorkerMessage, WorkerRequest } from './workers.ts';

/** Resolves once the message has been handed to the IPC channel, so disconnecting cannot drop it. */
const send = (message: WorkerMessage) =>
  new Promise<void>((resolve) => {
    process.send!(message, undefined, {}, () => resolve());
  });

process.on('unhandledRejection', (reason) => {
  void send({ type: 'failed', error: `unhandled rejection: ${describeError(reason)}` });
  process.exitCode = 1;
});

/** Words the parent sent after the request (see `RoleContext.told`), each resolved once. */
const words = new Map<string, { promise: Promise<void>; resolve: () => void }>();
const word = (name: string) => {
  let entry = words.get(name);
  if (!entry) {
    let resolve!: () => void;
    const promise = new Promise<void>((done) => (resolve = done));
    words.set(name, (entry = { promise, resolve }));
  }
  return entry;
};

process.once('message', (request: WorkerRequest) => {
  process.on('message', (message: ParentMessage) => {
    if (message.type === 'tell') word(message.word).resolve();
  });
  void (async () => {
    const backend = await openBackend(request.target);
    try {
      const run = await ROLES[request.role]();
      const emit = (event: unknown) => void send({ type: 'event', event });
      const told = (name: string) => word(name).promise;
      const result = await run(backend, request.params, { index: request.index, emit, told });
      await send({ type: 'done', result });
    } finally {
      await backend.close();
    }
  })()
    .catch(async (error: unknown) => {
      await send({ type: 'failed', error: describeError(error) });
      process.exitCode = 1;
    })
    .finally(() => process.disconnect());
});
