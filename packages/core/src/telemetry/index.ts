/**
 * `@stowage/core/telemetry`: OpenTelemetry spans and metrics for every stowage store.
 *
 * The adapter kit publishes each store call and a few measurements on `node:diagnostics_channel`
 * (see `STOWAGE_CHANNELS`); this module subscribes and reports them through `@opentelemetry/api`
 * (an optional peer dependency: only this entry point imports it). `StowageInstrumentation` has
 * the shape of an OpenTelemetry instrumentation, so the Node SDK's `instrumentations` option
 * and `registerInstrumentations` accept it; on its own it reports to the global providers.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  SpanKind,
  SpanStatusCode,
  context,
  metrics,
  trace,
  type Attributes,
  type Context,
  type Counter,
  type Histogram,
  type Meter,
  type MeterProvider,
  type Span,
  type Tracer,
  type TracerProvider,
  type UpDownCounter,
} from '@opentelemetry/api';
import packageJson from '../../package.json' with { type: 'json' };
import {
  STOWAGE_CHANNELS,
  operationChannel,
  type BatchMessage,
  type CacheLookupMessage,
  type LockWaitMessage,
  type OperationMessage,
  type ProcessClaimMessage,
  type ProcessTransitionMessage,
  type StoreIdentity,
} from '../diagnostics.js';
import { StowageError } from '../errors.js';

export interface StowageInstrumentationConfig {
  /** Subscribe at once (default true), as OpenTelemetry instrumentations do; else call `enable()`. */
  enabled?: boolean;
  /**
   * Put the key (or id) of single-key calls on their spans as `stowage.key` (default false:
   * keys often carry user data). Values, and error messages (which may quote keys or values),
   * are never reported.
   */
  includeKeys?: boolean;
}

const NAME = '@stowage/core';
const { version } = packageJson;

/** Calls that renew a lease: one that returns `false` found the lease gone (`stowage.lease.lost`). */
const LEASE_RENEWALS: ReadonlySet<string> = new Set(['locks.extend', 'snapshots.renew', 'process.extendLease']);

/**
 * Outcomes a caller expects and handles (a compare-and-set that lost, a lock someone else holds):
 * `error.type` says which, but the span is not an error span.
 */
const EXPECTED_OUTCOMES: ReadonlySet<string> = new Set(['E_VERSION_CONFLICT', 'E_LOCK_BUSY']);

/**
 * Runs a telemetry hook so that it can never throw into the application: a tracer, meter or
 * exporter that fails costs the telemetry of that call, never the call.
 */
function safely<R>(hook: () => R, fallback: R): R {
  try {
    return hook();
  } catch {
    return fallback;
  }
}

/** The bucket boundaries OpenTelemetry's semantic conventions advise for database operation durations (seconds). */
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/**
 * Turns what the stowage adapter kit publishes into OpenTelemetry spans and metrics: one span
 * per store call (named by its operation, e.g. `kv.get`) and the metrics listed in the README
 * ("Telemetry"). While it is disabled nothing subscribes, and the kit builds no message at all.
 *
 * ```ts
 * import { StowageInstrumentation } from '@stowage/core/telemetry';
 * new NodeSDK({ instrumentations: [new StowageInstrumentation()] }).start();
 * ```
 */
export class StowageInstrumentation {
  readonly instrumentationName = NAME;
  readonly instrumentationVersion: string = version;
  #config: Required<StowageInstrumentationConfig>;
  #tracer: Tracer;
  #instruments: Instruments;
  #enabled = false;
  /** The span and start time of each call in flight, by the message the kit published for it. */
  readonly #calls = new WeakMap<OperationMessage, { span: Span; started: number }>();
  /**
   * Runs each traced call inside its span's context, so what the call does (a driver's own
   * spans) and what a `withLock` function does nest under it. The kit's tracing channel runs
   * the call through `store.run(transform(message), call)`: this is that store, on the
   * OpenTelemetry context API instead of an `AsyncLocalStorage` of its own.
   */
  readonly #contextStore = { run: <R>(active: Context, fn: () => R): R => context.with(active, fn) };

  constructor(config: StowageInstrumentationConfig = {}) {
    this.#config = { enabled: true, includeKeys: false, ...config };
    this.#tracer = trace.getTracer(NAME, version);
    this.#instruments = createInstruments(metrics.getMeter(NAME, version));
    if (this.#config.enabled) this.enable();
  }

  setTracerProvider(provider: TracerProvider): void {
    this.#tracer = provider.getTracer(NAME, version);
  }

  setMeterProvider(provider: MeterProvider): void {
    this.#instruments = createInstruments(provider.getMeter(NAME, version));
  }

  getConfig(): StowageInstrumentationConfig {
    return { ...this.#config };
  }

  setConfig(config: StowageInstrumentationConfig = {}): void {
    this.#config = { enabled: true, includeKeys: false, ...config };
  }

  enable(): void {
    if (this.#enabled) return;
    this.#enabled = true;
    operationChannel.start.bindStore(this.#contextStore as unknown as AsyncLocalStorage<unknown>, this.#onStart);
    operationChannel.asyncEnd.subscribe(this.#onEnd as (message: unknown) => void);
    for (const [name, handler] of this.#handlers) subscribe(name, handler as (message: unknown) => void);
  }

  disable(): void {
    if (!this.#enabled) return;
    this.#enabled = false;
    operationChannel.start.unbindStore(this.#contextStore as unknown as AsyncLocalStorage<unknown>);
    operationChannel.asyncEnd.unsubscribe(this.#onEnd as (message: unknown) => void);
    for (const [name, handler] of this.#handlers) unsubscribe(name, handler as (message: unknown) => void);
  }

  /** Starts the call's span; returns the context the call runs in (the caller's, if the tracer fails). */
  readonly #onStart = (message: OperationMessage): Context => safely(() => this.#startSpan(message), context.active());

  #startSpan(message: OperationMessage): Context {
    const { store, operation, key, batchSize } = message;
    const attributes: Attributes = { ...operationAttributes(store, operation), 'stowage.store': store.name };
    if (batchSize !== undefined) attributes['db.operation.batch.size'] = batchSize;
    if (key !== undefined && this.#config.includeKeys) attributes['stowage.key'] = key;
    const kind = store.system === 'memory' ? SpanKind.INTERNAL : SpanKind.CLIENT;
    // The semantic conventions' span name: "{db.operation.name} {db.collection.name}".
    const name = store.collection === undefined ? operation : `${operation} ${store.collection}`;
    const span = this.#tracer.startSpan(name, { kind, attributes });
    this.#calls.set(message, { span, started: performance.now() });
    return trace.setSpan(context.active(), span);
  }

  /** Ends the call's span and records its duration, its error code, and a lost lease. */
  readonly #onEnd = (message: OperationMessage): void => safely(() => this.#endSpan(message), undefined);

  #endSpan(message: OperationMessage): void {
    const call = this.#calls.get(message);
    if (call === undefined) return; // started before this instrumentation was enabled
    this.#calls.delete(message);
    const { span, started } = call;
    const instruments = this.#instruments;
    let attributes = operationAttributes(message.store, message.operation);
    if ('error' in message) {
      const errorType = errorTypeOf(message.error);
      attributes = { ...attributes, 'error.type': errorType };
      span.setAttribute('error.type', errorType);
      const status = responseStatusCode(message.error);
      if (status !== undefined) span.setAttribute('db.response.status_code', status);
      // The code only: a message may quote the key or the value.
      if (!EXPECTED_OUTCOMES.has(errorType)) span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
      instruments.errors.add(1, attributes);
    } else if (message.result === false && LEASE_RENEWALS.has(message.operation)) {
      instruments.leasesLost.add(1, attributes);
    }
    span.end();
    instruments.duration.record((performance.now() - started) / 1000, attributes);
  }

  /** The metric handlers of the plain channels, each run {@link safely}. */
  readonly #handlers: ReadonlyArray<readonly [string, (message: never) => void]> = guarded([
    [
      STOWAGE_CHANNELS.cacheLookup,
      ({ store, hit }: CacheLookupMessage) => (hit ? this.#instruments.cacheHits : this.#instruments.cacheMisses).add(1, storeAttributes(store)),
    ],
    [
      STOWAGE_CHANNELS.lockWait,
      ({ store, waited, acquired, wakeups }: LockWaitMessage) => {
        const attributes = storeAttributes(store);
        this.#instruments.lockWait.record(waited / 1000, { ...attributes, 'stowage.lock.acquired': acquired });
        if (wakeups > 0) this.#instruments.wakeups.add(wakeups, attributes);
      },
    ],
    [
      STOWAGE_CHANNELS.batch,
      ({ store, operation, size }: BatchMessage) => this.#instruments.batchSize.record(size, operationAttributes(store, operation)),
    ],
    [
      STOWAGE_CHANNELS.processClaim,
      ({ store, process, state, lag }: ProcessClaimMessage) =>
        this.#instruments.processLag.record(Math.max(0, lag) / 1000, processAttributes(store, process, state)),
    ],
    [
      STOWAGE_CHANNELS.processTransition,
      ({ store, process, from, to, kind }: ProcessTransitionMessage) => {
        const { transitions, items } = this.#instruments;
        const attributes: Attributes = { ...processAttributes(store, process, to), 'stowage.process.transition': kind };
        if (from !== null) attributes['stowage.process.from_state'] = from;
        transitions.add(1, attributes);
        items.add(1, processAttributes(store, process, to));
        if (from !== null) items.add(-1, processAttributes(store, process, from));
      },
    ],
  ]);
}

function guarded(handlers: ReadonlyArray<readonly [string, (message: never) => void]>): ReadonlyArray<readonly [string, (message: never) => void]> {
  return handlers.map(([name, handler]) => [name, (message: never) => safely(() => handler(message), undefined)] as const);
}

interface Instruments {
  duration: Histogram;
  errors: Counter;
  cacheHits: Counter;
  cacheMisses: Counter;
  lockWait: Histogram;
  wakeups: Counter;
  leasesLost: Counter;
  batchSize: Histogram;
  processLag: Histogram;
  transitions: Counter;
  items: UpDownCounter;
}

function createInstruments(meter: Meter): Instruments {
  const seconds = (name: string, description: string) =>
    meter.createHistogram(name, { unit: 's', description, advice: { explicitBucketBoundaries: DURATION_BUCKETS } });
  return {
    // Not db.client.operation.duration: that is the drivers' name for one database round trip,
    // and a stowage call may include several, a withLock body or a getOrSet loader.
    duration: seconds('stowage.operation.duration', 'Duration of whole stowage store calls (withLock bodies and getOrSet loaders included)'),
    errors: meter.createCounter('stowage.operation.errors', { unit: '{error}', description: 'Store calls that failed, by StowageError code (error.type)' }),
    cacheHits: meter.createCounter('stowage.cache.hits', { unit: '{lookup}', description: 'Cache reads (get, getOrSet) that found a live entry' }),
    cacheMisses: meter.createCounter('stowage.cache.misses', { unit: '{lookup}', description: 'Cache reads (get, getOrSet) that found none' }),
    lockWait: seconds('stowage.lock.wait.duration', 'Time a lock acquisition took until granted or given up'),
    wakeups: meter.createCounter('stowage.lock.wakeups', { unit: '{wakeup}', description: 'Waiting acquisitions woken by a release the database announced (hand-off)' }),
    leasesLost: meter.createCounter('stowage.lease.lost', { unit: '{lease}', description: 'Lease renewals that found the lease gone' }),
    batchSize: meter.createHistogram('stowage.batch.size', {
      unit: '{call}',
      description: 'Concurrent point calls sent as one statement',
      advice: { explicitBucketBoundaries: BATCH_BUCKETS },
    }),
    processLag: seconds('stowage.process.lag', 'Time from an item entering a state to its first claim (database clock)'),
    transitions: meter.createCounter('stowage.process.transitions', { unit: '{transition}', description: 'Process items created or moved to a state' }),
    items: meter.createUpDownCounter('stowage.process.items', {
      unit: '{item}',
      description: 'Items by state, as counted from the creations and transitions this process applied',
    }),
  };
}

/** Attribute objects are built once per store and operation (or state) and reused. */
const attributeCache = new WeakMap<StoreIdentity, Map<string, Attributes>>();

function cachedAttributes(store: StoreIdentity, key: string, build: () => Attributes): Attributes {
  let byKey = attributeCache.get(store);
  if (byKey === undefined) attributeCache.set(store, (byKey = new Map()));
  let attributes = byKey.get(key);
  if (attributes === undefined) byKey.set(key, (attributes = Object.freeze(build())));
  return attributes;
}

function storeAttributes(store: StoreIdentity): Attributes {
  return cachedAttributes(store, '', () => {
    const attributes: Attributes = {};
    if (store.system !== undefined) attributes['db.system.name'] = store.system;
    if (store.collection !== undefined) attributes['db.collection.name'] = store.collection;
    if (store.namespace !== undefined) attributes['db.namespace'] = store.namespace;
    if (store.server !== undefined) {
      attributes['server.address'] = store.server.address;
      if (store.server.port !== undefined) attributes['server.port'] = store.server.port;
    }
    return attributes;
  });
}

function operationAttributes(store: StoreIdentity, operation: string): Attributes {
  return cachedAttributes(store, `op:${operation}`, () => ({ ...storeAttributes(store), 'db.operation.name': operation }));
}

function processAttributes(store: StoreIdentity, process: string, state: string): Attributes {
  return cachedAttributes(store, `process:${process}\u0000${state}`, () => ({
    ...storeAttributes(store),
    'stowage.process.name': process,
    'stowage.process.state': state,
  }));
}

/**
 * `db.response.status_code`: the database's own code for the failure, from the driver error
 * kept as `cause` (a PostgreSQL SQLSTATE such as `40001`, a MongoDB error code such as `11000`).
 */
function responseStatusCode(error: unknown): string | undefined {
  const code = (error as { cause?: { code?: unknown } } | null)?.cause?.code;
  if (typeof code === 'number') return String(code);
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** `error.type`: the StowageError code, else the error's class name. */
function errorTypeOf(error: unknown): string {
  if (error instanceof StowageError) return error.code;
  if (error instanceof Error) return error.name;
  return '_OTHER';
}
