/**
 * The LockProvider conformance cases, one file per concern, registered in this order (the
 * order they always had; the harness runs the exclusive ones last).
 */
import { joinCases } from '../../harness.js';
import { leaseCases } from './leases.js';
import { waitingCases } from './waiting.js';
import { withLockCases } from './with-lock.js';
import { lifecycleCases } from './lifecycle.js';

export const lockCases = joinCases(leaseCases, waitingCases, withLockCases, lifecycleCases);
