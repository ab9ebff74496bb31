/**
 * Telemetry can never throw into the application: with a tracer whose spans fail at every step
 * and a meter whose instruments fail on every record, every store call of a run that reaches
 * each publishing site of the kit still completes with its own outcome, and nothing surfaces as
 * an uncaught exception (a throwing diagnostics_channel subscriber would be rethrown on the next
 * tick and end the process).
 */
import type { Meter, MeterProvider, Span, Tracer, TracerProvider } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { StowageInstrumentation } from '../../src/telemetry/index.js';
import { MemoryKeyValueStore } from '../../src/memory/index.js';
import { runWorkload } from './workload.js';

function fail(): never {
  throw new Error('telemetry backend failed');
}

/** Every method of every object it hands out throws. */
const throwingTracerProvider: TracerProvider = {
  getTracer: (): Tracer =>
    ({
      startSpan: fail,
      startActiveSpan: fail,
    }) as Tracer,
};
const brokenSpanTracerProvider: TracerProvider = {
  getTracer: (): Tracer => ({ startSpan: () => new Proxy({}, { get: () => fail }) as Span, startActiveSpan: fail }) as Tracer,
};
const throwingMeterProvider: MeterProvider = {
  getMeter: (): Meter => new Proxy({}, { get: () => () => new Proxy({}, { get: () => fail }) }) as Meter,
};

let instrumentation: StowageInstrumentation | undefined;
afterEach(() => {
  instrumentation?.disable();
  instrumentation = undefined;
});

describe('StowageInstrumentation with a failing telemetry backend', () => {
  it.each([
    ['a tracer whose startSpan throws', throwingTracerProvider],
    ['spans whose every method throws', brokenSpanTracerProvider],
  ])('%s, and instruments that throw: every call completes', async (_name, tracerProvider) => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => void uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      instrumentation = new StowageInstrumentation();
      instrumentation.setTracerProvider(tracerProvider);
      instrumentation.setMeterProvider(throwingMeterProvider);
      await runWorkload();
      const kv = new MemoryKeyValueStore();
      await kv.set('k', 'v');
      expect(await kv.get('k')).toBe('v');
      await expect(kv.compareAndSet('k', 'w', 12345)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
      await kv.close();
      await new Promise((resolve) => setTimeout(resolve, 10)); // a rethrown subscriber error would land by now
    } finally {
      process.off('uncaughtException', onUncaught);
    }
    expect(uncaught).toEqual([]);
  });
});
