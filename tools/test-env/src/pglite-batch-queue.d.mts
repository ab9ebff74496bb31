import type { PGlite } from '@electric-sql/pglite';
import type { PGLiteSocketServer } from '@electric-sql/pglite-socket';

export declare class BatchQueryQueue {
  constructor(db: PGlite);
}

export declare function createPGliteSocketServer(
  serverClass: typeof PGLiteSocketServer,
  db: PGlite,
  maxConnections: number,
): PGLiteSocketServer;
