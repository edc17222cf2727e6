/**
 * Traces (OpenTelemetry 1.x, the line @temporalio/interceptors-opentelemetry 1.24 is built on): one trace per
 * accepted order, from the purchase through its start, workflow and activities to its Kafka event; a payment links
 * to it. Off by default (no provider installed). The sold-out answer is never traced: it is most of a stampede and
 * acts for no one.
 */
import { createWriteStream, openSync, type WriteStream } from 'node:fs';
import { context, diag, DiagLogLevel, propagation, ROOT_CONTEXT, SpanStatusCode, trace, type Attributes, type Context, type Link, type Span, type SpanKind } from '@opentelemetry/api';
import { ExportResultCode, hrTimeToMilliseconds, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BatchSpanProcessor, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { Config } from '../config';
import type { Logger } from '../infra/logger';

/** The tracer of our own spans (the API's, the starter's, the publisher's); a no-op until startTracing installs one. */
export const tracer = trace.getTracer('flash-sale');

/** Attribute keys of our spans (the Temporal interceptors add temporalWorkflowId and their own). */
export const ATTR = {
  orderId: 'flash_sale.order_id',
  saleId: 'flash_sale.sale_id',
  itemId: 'flash_sale.item_id',
  outcome: 'flash_sale.outcome',
  queueWaitMs: 'flash_sale.start_queue.wait_ms',
} as const;

/** What a process with tracing on holds: the processor and resource the worker's Temporal plugin exports through. */
export interface Tracing {
  processor: SpanProcessor;
  resource: Resource;
  /** Exports the spans still buffered (waiting at most 5 s) and stops; call once, at the process' end. */
  shutdown(): Promise<void>;
}

/** One span as a JSON line (OTEL_TRACES_EXPORTER=jsonl): times in ms since the epoch, read by `npm run trace`. */
export interface SpanLine {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: SpanKind;
  service: string;
  startMs: number;
  durationMs: number;
  attributes: Attributes;
  links: { traceId: string; spanId: string }[];
  error?: string;
}

/** @returns a finished span as a SpanLine */
export function spanLine(span: ReadableSpan): SpanLine {
  return {
    traceId: span.spanContext().traceId,
    spanId: span.spanContext().spanId,
    ...(span.parentSpanId && { parentSpanId: span.parentSpanId }),
    name: span.name,
    kind: span.kind,
    service: String(span.resource.attributes['service.name']),
    startMs: hrTimeToMilliseconds(span.startTime),
    durationMs: hrTimeToMilliseconds(span.duration),
    attributes: span.attributes,
    links: span.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId })),
    ...(span.status.code === SpanStatusCode.ERROR && { error: span.status.message ?? 'error' }),
  };
}

/**
 * Appends each span as one JSON line to a file: the development view without a collector. Each batch is one
 * write of whole lines to a file opened for appending, so processes that share a file do not cut each other's
 * lines on a local Linux file system; one file per process (`npm run trace` reads several) needs no such care.
 * The file is opened at once, so a path that cannot be written fails the process' start, not a sale; a failed
 * write later (a full disk) fails that export, reported once, and never the process.
 */
class JsonLinesExporter implements SpanExporter {
  private readonly out: WriteStream;
  private failure: Error | undefined;

  /** @throws Error naming OTEL_TRACES_FILE when the file cannot be opened for appending */
  constructor(path: string, warn: (message: string) => void) {
    let fd;
    try {
      fd = openSync(path, 'a');
    } catch (err) {
      throw new Error(`OTEL_TRACES_FILE ${path}: cannot append to it (${(err as Error).message})`, { cause: err });
    }
    this.out = createWriteStream(path, { fd });
    this.out.on('error', (err) => {
      if (!this.failure) warn(`spans not written to ${path}: ${err.message}`);
      this.failure = err;
    });
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    if (this.failure) return done({ code: ExportResultCode.FAILED, error: this.failure });
    const text = spans.map((s) => JSON.stringify(spanLine(s))).join('\n') + '\n';
    this.out.write(text, (err) => done(err ? { code: ExportResultCode.FAILED, error: err } : { code: ExportResultCode.SUCCESS }));
  }

  shutdown(): Promise<void> {
    return new Promise((resolve) => this.out.end(resolve));
  }
}

/** How long a process' end waits for its last spans (a collector that is down would hold it for 30 s). ms */
const SHUTDOWN_WAIT_MS = 5000;

/**
 * Installs this process' tracer provider (AsyncLocalStorage context, W3C trace context propagation only: no
 * baggage travels with an order), exporting through a batch processor (OTEL_BSP_* tune it), when
 * OTEL_TRACES_EXPORTER is not none. The SDK's own warnings (an export that failed, spans dropped from a full
 * queue) go to `log`.
 * @param role the process' role: service.name is `flash-sale-<role>` unless OTEL_SERVICE_NAME says otherwise
 * @returns the installed tracing, or undefined when tracing is off
 * @throws Error naming OTEL_TRACES_FILE when that file cannot be opened for appending (jsonl)
 */
export function startTracing(config: Config, role: 'api' | 'worker' | 'starter' | 'ledger', log: Logger): Tracing | undefined {
  if (config.OTEL_TRACES_EXPORTER === 'none') return undefined;
  const warn = (message: string) => log.warn({ component: 'opentelemetry' }, message);
  diag.setLogger({ error: warn, warn, info: () => undefined, debug: () => undefined, verbose: () => undefined }, DiagLogLevel.WARN);
  const resource = Resource.default().merge(new Resource({ 'service.name': config.OTEL_SERVICE_NAME ?? `flash-sale-${role}` }));
  const exporter = config.OTEL_TRACES_EXPORTER === 'otlp' ? new OTLPTraceExporter() : new JsonLinesExporter(config.OTEL_TRACES_FILE, warn);
  const processor = new BatchSpanProcessor(exporter);
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return {
    processor,
    resource,
    shutdown: () => Promise.race([provider.shutdown(), new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_WAIT_MS).unref())]),
  };
}

/**
 * Runs fn in a new active span, which ends when fn settles; a throw is recorded on the span and thrown on.
 * @param attributes the span's attributes at its start; fn may add more
 */
export async function inSpan<T>(name: string, options: { kind?: SpanKind; attributes?: Attributes; links?: Link[] }, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer.startActiveSpan(name, options, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** @returns the active span's W3C traceparent (`00-<trace>-<span>-<flags>`), or undefined when none is active */
export function activeTraceParent(): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent;
}

/** @returns a context whose remote parent is the given traceparent (the root context when there is none) */
export function contextOf(traceParent: string | undefined): Context {
  return traceParent ? propagation.extract(ROOT_CONTEXT, { traceparent: traceParent }) : ROOT_CONTEXT;
}

/** @returns a link to the span a traceparent names, or undefined when it names none */
export function linkTo(traceParent: string | null | undefined): Link | undefined {
  const span = traceParent ? trace.getSpanContext(contextOf(traceParent)) : undefined;
  return span && { context: span };
}
