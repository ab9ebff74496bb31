// A query queue for @electric-sql/pglite-socket's multiplexer that keeps each client's
// extended-protocol batch together.
//
// pglite-socket 0.2.x runs every wire message of every connection through one queue, one
// message at a time, and keeps a connection's messages together only inside an explicit
// transaction. The `pg` driver sends a parameterised query as Parse/Bind/Describe/Execute/Sync
// on the unnamed statement, so two connections querying at once can interleave: one
// connection's Bind then lands on the other's Parse, and a statement silently runs with the
// wrong parameters or not at all. This queue serves one connection exclusively from its first
// message until its batch ends (Sync or a simple Query) and, as before, for a whole
// transaction.

const SYNC = 0x53; // 'S'
const SIMPLE_QUERY = 0x51; // 'Q'
const TERMINATE = 0x58; // 'X'
const STARTUP = 0x00; // startup and SSL/cancel requests start with a length, not a type byte

export class BatchQueryQueue {
  #db;
  #queue = [];
  #processing = false;
  /** The connection being served exclusively, or null. */
  #owner = null;

  constructor(db) {
    this.#db = db;
  }

  enqueue(handlerId, message, onData) {
    return new Promise((resolve, reject) => {
      this.#queue.push({ handlerId, message, onData, resolve, reject });
      void this.#process();
    });
  }

  getQueueLength() {
    return this.#queue.length;
  }

  clearQueueForHandler(handlerId) {
    this.#queue = this.#queue.filter((item) => {
      if (item.handlerId !== handlerId) return true;
      item.reject(new Error('Handler disconnected'));
      return false;
    });
  }

  async clearTransactionIfNeeded(handlerId) {
    if (this.#owner !== handlerId) return;
    if (this.#db.isInTransaction()) await this.#db.exec('ROLLBACK');
    this.#owner = null;
    void this.#process();
  }

  async #process() {
    if (this.#processing) return;
    this.#processing = true;
    try {
      for (;;) {
        const index = this.#owner === null ? 0 : this.#queue.findIndex((item) => item.handlerId === this.#owner);
        if (index === -1 || this.#queue.length === 0) return;
        const [item] = this.#queue.splice(index, 1);
        let bytes = 0;
        try {
          await this.#db.runExclusive(() =>
            this.#db.execProtocolRawStream(item.message, {
              onRawData: (data) => {
                bytes += data.length;
                item.onData(data);
              },
            }),
          );
        } catch (error) {
          this.#owner = null;
          item.reject(error);
          continue;
        }
        const type = item.message[0];
        const batchEnded = type === SYNC || type === SIMPLE_QUERY || type === TERMINATE || type === STARTUP;
        this.#owner = !batchEnded || this.#db.isInTransaction() ? item.handlerId : null;
        item.resolve(bytes);
      }
    } finally {
      this.#processing = false;
    }
  }
}

/** A pglite-socket server on 127.0.0.1 (port chosen by the OS) that uses {@link BatchQueryQueue}. */
export function createPGliteSocketServer(PGLiteSocketServer, db, maxConnections) {
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections });
  server.queryQueue = new BatchQueryQueue(db);
  return server;
}
