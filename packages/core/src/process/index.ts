export { defineProcess, exponentialBackoff, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_DEAD_LETTER_STATE } from './define.js';
export { bindProcess } from './bind.js';
export { DEFAULT_CURSOR_PREFIX } from './worker.js';
export { DEFAULT_ITEM_LIST_LIMIT, MAX_ITEM_LIST_LIMIT } from './validation.js';
export type * from '../contracts/process.js';
