import { describeConformance } from '@stowage/core/conformance';
import { postgresConformanceAdapter } from './support/context.js';
import { embeddedTestSetup } from './support/embedded.js';

/**
 * The core conformance suite, unchanged, against embedded PGlite (through pglite-socket and
 * the real `pg` driver), in its own process so that its clock is not this process's `Date`.
 *
 * PGlite is one database session behind a multiplexer that can interleave the extended-protocol
 * messages of concurrent connections (one connection's Bind can reach another's unnamed
 * statement). So every store shares one pool of one connection, passed in (stores never end
 * it; this also covers the bring-your-own-pool path), and vitest runs these cases one at a
 * time (see vitest.config.ts). LISTEN wake-ups do not reach a listener through the
 * multiplexer; the lock provider detects that and reports `wakeups: false`.
 */
const { embedded, pool } = await embeddedTestSetup('stowage-conformance');
console.log(`[stowage postgres] conformance backend: ${embedded.label}`);

describeConformance(
  postgresConformanceAdapter({
    name: `postgres (${embedded.label})`,
    connection: () => ({ pool }),
    admin: () => pool,
  }),
);
