/**
 * The KeyValueStore conformance cases, one file per concern, registered in this order (the order
 * they always had; the harness runs the exclusive ones last).
 */
import { joinCases } from '../../harness.js';
import { basicCases } from './basics.js';
import { globCases } from './globs.js';
import { batchCases } from './batches.js';
import { expiryCases } from './expiry.js';
import { versionCases } from './versions.js';
import { lifecycleCases } from './lifecycle.js';

export const keyValueCases = joinCases(basicCases, globCases, batchCases, expiryCases, versionCases, lifecycleCases);
