/**
 * OpenTelemetry set up the way an application would, with in-memory exporters so the run can
 * print (and the test can check) exactly what was exported. In production you would pass OTLP
 * exporters instead, or list `new StowageInstrumentation()` in the Node SDK's `instrumentations`.
 */
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { StowageInstrumentation, type StowageInstrumentationConfig } from '@stowage/core/telemetry';

export interface Telemetry {
  /** Every span ended so far. */
  spans(): ReadableSpan[];
  /** Every metric, as of now (cumulative since the start). */
  metrics(): Promise<MetricData[]>;
  shutdown(): Promise<void>;
}

export function startTelemetry(config: StowageInstrumentationConfig = {}): Telemetry {
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  const spanExporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // Exported on demand (forceFlush) rather than on a timer.
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });

  const stowage = new StowageInstrumentation(config);
  const unregister = registerInstrumentations({ instrumentations: [stowage], tracerProvider, meterProvider });

  return {
    spans: () => spanExporter.getFinishedSpans(),
    metrics: async () => {
      metricExporter.reset();
      await reader.forceFlush();
      return metricExporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics));
    },
    shutdown: async () => {
      unregister(); // disables the instrumentation: the stowage channels lose their subscribers
      await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]);
      context.disable();
    },
  };
}
