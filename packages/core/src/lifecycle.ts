import { closedError } from './errors.js';

/**
 * Tracks whether a contract object is closed. `close(release)` runs `release` once; later
 * calls return the same promise. `assertOpen()` throws `E_CLOSED` afterwards.
 */
export class Lifecycle {
  #closing: Promise<void> | undefined;

  constructor(private readonly name: string) {}

  get isClosed(): boolean {
    return this.#closing !== undefined;
  }

  assertOpen(): void {
    if (this.#closing !== undefined) throw closedError(this.name);
  }

  close(release: () => Promise<void> = async () => {}): Promise<void> {
    this.#closing ??= release();
    return this.#closing;
  }
}
