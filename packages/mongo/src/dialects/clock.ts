import type { MeasuredClock } from '@stowage/core/adapter';

/** The last version candidate this process handed out (see {@link ServerClock.nextVersion}). */
let lastVersion = 0;

/**
 * The server's clock as this process measures it (`hello.localTime` plus the time elapsed on
 * this process's monotonic clock, re-measured in the background), which both dialects use for
 * the dates and versions a command carries as values.
 */
export abstract class ServerClock {
  readonly #clock: MeasuredClock;

  protected constructor(clock: MeasuredClock) {
    this.#clock = clock;
  }

  now(): Date {
    return new Date(this.#clock.now());
  }

  /**
   * The server's time in microseconds, above every candidate this process handed out (for
   * every store and client) and above `above`. Within a process candidates strictly grow, so a
   * process never writes one version twice; across processes the stored version's `+ 1`
   * keeps them apart (see `MongoDialect`).
   */
  nextVersion(above = 0): number {
    lastVersion = Math.max(this.#clock.now() * 1000, lastVersion + 1, above + 1);
    return lastVersion;
  }
}
