export { defineProcess, exponentialBackoff, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_DEAD_LETTER_STATE } from './define.js';
export { createStateMachine } from './state-machine.js';
export { StateMachineWorker, cursorKey, DEFAULT_CURSOR_PREFIX } from './worker.js';
export * from './validation.js';
export type * from '../contracts/process.js';
