import type { HasCapabilities } from '../capabilities.js';

/**
 * Every contract object can be closed. `close()` is idempotent; afterwards every other call
 * rejects with `StowageError` code `E_CLOSED`. Connections the user passed in (a `pg.Pool`, a
 * `MongoClient`, a `Db`) are never closed by stowage; connections stowage opened are.
 */
export interface Closable {
  close(): Promise<void>;
}

export interface StowageResource extends Closable, HasCapabilities {}
