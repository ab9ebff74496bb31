import { monotonicClock, type Clock } from './clock.js';

/** One measurement of a remote clock against this process's clock. */
export interface ClockSample {
  /** Remote time minus local time, in milliseconds. */
  offset: number;
  /** The round trip the sample took; the offset is accurate to within half of it. */
  roundTrip: number;
  /** Local time (of the clock passed in) when the sample was taken. */
  measuredAt: number;
}

export interface MeasuredClockOptions {
  /** The local clock the offset is added to. Default: {@link monotonicClock}, which mocking `Date` does not move. */
  local?: Clock;
  /** Take a new sample in the background when the last one is older than this (ms, default 60 000). */
  refreshEvery?: number;
}

/**
 * The clock of a remote server (a database that cannot compute times in its own statements),
 * estimated as local time plus an offset measured over a round trip:
 * `offset = serverTime - (sentAt + receivedAt) / 2`. A client whose own clock is minutes off
 * still gets the server's time, to within half a round trip.
 *
 * `now()` never waits: when the sample is stale it starts a new measurement in the background
 * and answers with the current one. Call `measure()` once before the first `now()`.
 */
export class MeasuredClock implements Clock {
  readonly #readServerTime: () => Promise<number | Date>;
  readonly #local: Clock;
  readonly #refreshEvery: number;
  #sample: ClockSample | undefined;
  #measuring: Promise<ClockSample> | undefined;

  constructor(readServerTime: () => Promise<number | Date>, options: MeasuredClockOptions = {}) {
    this.#readServerTime = readServerTime;
    this.#local = options.local ?? monotonicClock;
    this.#refreshEvery = options.refreshEvery ?? 60_000;
  }

  /** The sample in use, or `undefined` before the first measurement. */
  get sample(): ClockSample | undefined {
    return this.#sample;
  }

  /** Takes a sample now (concurrent calls share one round trip). */
  measure(): Promise<ClockSample> {
    this.#measuring ??= this.#takeSample().finally(() => {
      this.#measuring = undefined;
    });
    return this.#measuring;
  }

  /** Uses a server time that arrived with another reply (e.g. the `hello` sent anyway at start-up). */
  record(serverTime: number | Date, sentAt: number, receivedAt: number): ClockSample {
    const server = typeof serverTime === 'number' ? serverTime : serverTime.getTime();
    const sample = { offset: server - (sentAt + receivedAt) / 2, roundTrip: receivedAt - sentAt, measuredAt: receivedAt };
    // A slow reply says less about the offset than a fast one: keep a recent fast sample over it.
    const current = this.#sample;
    const currentIsFresh = current !== undefined && receivedAt - current.measuredAt < 3 * this.#refreshEvery;
    if (!currentIsFresh || sample.roundTrip <= 2 * current.roundTrip + 5) this.#sample = sample;
    return this.#sample!;
  }

  /** The server's time now, in epoch milliseconds. */
  now(): number {
    const sample = this.#sample;
    if (sample === undefined) throw new Error('MeasuredClock.now() called before measure()');
    const local = this.#local.now();
    if (local - sample.measuredAt > this.#refreshEvery && this.#measuring === undefined) {
      // Background refresh; a failure keeps the old sample and is retried on a later call.
      this.measure().catch(() => undefined);
    }
    return Math.round(local + sample.offset);
  }

  async #takeSample(): Promise<ClockSample> {
    const sentAt = this.#local.now();
    const serverTime = await this.#readServerTime();
    return this.record(serverTime, sentAt, this.#local.now());
  }
}
