import type { StowageResource } from '../contracts/common.js';
import { StowageError } from '../errors.js';

/**
 * What a backend's `connect()` returns is built on: the stores it hands out share one
 * connection (a `pg.Pool`, a `MongoClient`) and the store options given to `connect()`; a
 * store's own options may not name a connection setting (`E_INVALID_OPTION`: it would open a
 * connection of its own); `close()` closes every store handed out (each waits for its calls in
 * flight), then lets the connection go. A backend's subclass adds one typed method per store
 * (`kv()`, `locks()`, …), each `this.open(new TheStore(this.storeOptions(options)))`.
 */
export abstract class StoreSet<TShared extends object> {
  /** What every store gets: the connection and the shared store options. */
  readonly #shared: TShared;
  /** The options only `connect()` takes. */
  readonly #connectionOptions: readonly string[];
  /** Lets the connection go, after every store closed. */
  readonly #release: () => Promise<void>;
  readonly #stores = new Set<StowageResource>();
  #closing: Promise<void> | undefined;

  protected constructor(shared: TShared, connectionOptions: readonly string[], release: () => Promise<void>) {
    this.#shared = shared;
    this.#connectionOptions = connectionOptions;
    this.#release = release;
  }

  /** Closes every store handed out, then lets the connection go. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await Promise.all([...this.#stores].map((store) => store.close()));
      await this.#release();
    })();
    return this.#closing;
  }

  /** A store's options: the shared ones, then the store's own. */
  protected storeOptions<T extends object>(options: T): T & TShared {
    if (this.#closing !== undefined) throw new StowageError('E_CLOSED', 'this connection is closed');
    if (options === null || typeof options !== 'object') throw new StowageError('E_INVALID_OPTION', 'store options must be an object');
    const misplaced = this.#connectionOptions.filter((name) => name in options);
    if (misplaced.length > 0) {
      throw new StowageError('E_INVALID_OPTION', `${misplaced.join(', ')}: connection settings belong to connect(), not to one store`);
    }
    return { ...this.#shared, ...options };
  }

  /** Hands `store` out: {@link close} closes it. */
  protected open<T extends StowageResource>(store: T): T {
    this.#stores.add(store);
    return store;
  }
}
