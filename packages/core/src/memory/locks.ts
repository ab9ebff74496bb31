import { LockProviderBase } from '../adapter/locks.js';
import { MEMORY_HANDLE, resolveMemoryOptions, type MemoryOptions } from './storage.js';

export type MemoryLockProviderOptions = MemoryOptions;

/**
 * Leases with fencing tokens in process memory. A release wakes the longest-waiting
 * acquisition on the same storage at once; the others wait on (and poll, for expiry).
 */
export class MemoryLockProvider extends LockProviderBase {

  constructor(options?: MemoryLockProviderOptions) {
    const { storage, clock } = resolveMemoryOptions(options);
    super({ name: 'MemoryLockProvider', system: 'memory' }, MEMORY_HANDLE, storage.locks.driver(clock));
  }
}
