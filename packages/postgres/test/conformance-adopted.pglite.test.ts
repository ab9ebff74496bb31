import { describeKeyValueStore } from '@stowage/core/conformance';
import { adoptedKeyValueAdapter } from './support/adopted.js';
import { embeddedTestSetup } from './support/embedded.js';

/**
 * The core conformance cases of the key-value store on tables created as awaitly-postgres's
 * docs show them and adopted in place, on embedded PGlite (one pooled connection, cases one
 * at a time: see conformance.pglite.test.ts).
 */
const { embedded, pool } = await embeddedTestSetup('stowage-conformance');

describeKeyValueStore(
  adoptedKeyValueAdapter({
    name: `adopted awaitly-postgres table (${embedded.label})`,
    connection: () => ({ pool }),
    admin: () => pool,
  }),
);
