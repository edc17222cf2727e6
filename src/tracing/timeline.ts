/**
 * One order's timeline from spans (SpanLine, as OTEL_TRACES_EXPORTER=jsonl writes them): the development view
 * of a trace where no collector runs (`npm run trace`). Pure functions over the spans read, but readSpanFiles.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { SpanKind } from '@opentelemetry/api';
import { ATTR, type SpanLine } from './index';

/**
 * @returns the spans of JSON lines files, read a chunk at a time (a sale's files pass the size of one string); a
 *   line cut short (a process killed mid-write) is skipped
 * @throws the fs error of a file that cannot be read
 */
export function readSpanFiles(files: readonly string[]): SpanLine[] {
  const spans: SpanLine[] = [];
  const chunk = Buffer.alloc(1 << 20);
  for (const file of files) {
    const fd = openSync(file, 'r');
    try {
      const decoder = new StringDecoder('utf8');
      let rest = '';
      const take = (text: string) => {
        const lines = (rest + text).split('\n');
        rest = lines.pop() ?? '';
        for (const line of lines) {
          try {
            if (line) spans.push(JSON.parse(line) as SpanLine);
          } catch {
            // Cut short: skipped.
          }
        }
      };
      for (let n; (n = readSync(fd, chunk, 0, chunk.length, null)) > 0; ) take(decoder.write(chunk.subarray(0, n)));
      take(decoder.end() + '\n');
    } finally {
      closeSync(fd);
    }
  }
  return spans;
}

/** An order's trace, and the traces of its other work: those that link to it or name the order (its payment's). */
export interface OrderTrace {
  orderId: string;
  traceId: string;
  spans: SpanLine[];
  /** The type of the order's last event published (OrderPaid, OrderExpired…), when the spans hold one. */
  lastEvent?: string;
  /** ms from the purchase request's start to the end of the order's placeOrder activity (stored, OrderPlaced out); undefined if it has not run. */
  placedAfterMs?: number;
}

const RUN_PLACE_ORDER = 'RunActivity:placeOrder';

/** @returns the earliest start among the spans (ms); a loop, not Math.min(...), which a large trace overflows */
const earliest = (spans: readonly SpanLine[]) => spans.reduce((min, s) => Math.min(min, s.startMs), Infinity);

/** @returns the order a span names: our attribute, or the workflow id Temporal's spans carry (= orderId) */
const orderOf = (s: SpanLine) => s.attributes[ATTR.orderId] ?? s.attributes.workflowId ?? s.attributes.temporalWorkflowId;

/**
 * @returns each order's trace (found by its reserve span's order id), with the traces of its other work: those
 *   that link into it (a payment to a stored order) and those whose spans name the order (a payment that
 *   stored it, a `paid` signal from a sender that does not trace)
 */
export function orderTraces(spans: readonly SpanLine[]): OrderTrace[] {
  const byTrace = new Map<string, SpanLine[]>();
  const related = new Map<string, Set<string>>();
  const relate = (key: string, traceId: string) => {
    const set = related.get(key);
    if (set) set.add(traceId);
    else related.set(key, new Set([traceId]));
  };
  for (const s of spans) {
    const own = byTrace.get(s.traceId);
    if (own) own.push(s);
    else byTrace.set(s.traceId, [s]);
    for (const l of s.links) relate(`trace:${l.traceId}`, s.traceId);
    const order = orderOf(s);
    if (typeof order === 'string') relate(`order:${order}`, s.traceId);
  }
  const out: OrderTrace[] = [];
  for (const [traceId, own] of byTrace) {
    const reserve = own.find((s) => s.name === 'reserve' && typeof s.attributes[ATTR.orderId] === 'string');
    if (!reserve) continue;
    const orderId = String(reserve.attributes[ATTR.orderId]);
    const others = new Set([...(related.get(`trace:${traceId}`) ?? []), ...(related.get(`order:${orderId}`) ?? [])]);
    others.delete(traceId);
    const all = [...own, ...[...others].flatMap((t) => byTrace.get(t) ?? [])];
    const first = earliest(own);
    const placed = own.find((s) => s.name === RUN_PLACE_ORDER);
    const events = all.filter((s) => s.kind === SpanKind.PRODUCER && typeof s.attributes['messaging.message.id'] === 'string').sort((a, b) => a.startMs - b.startMs);
    const lastEvent = events.length ? String(events[events.length - 1].attributes['messaging.message.id']).split(':')[1] : undefined;
    out.push({
      orderId,
      traceId,
      spans: all,
      ...(lastEvent && { lastEvent }),
      ...(placed && { placedAfterMs: placed.startMs + placed.durationMs - first }),
    });
  }
  return out;
}

/** @returns the trace whose order took longest to be placed (placedAfterMs), or undefined when none was */
export function slowestOrder(traces: readonly OrderTrace[]): OrderTrace | undefined {
  return traces.filter((t) => t.placedAfterMs !== undefined).sort((a, b) => (b.placedAfterMs as number) - (a.placedAfterMs as number))[0];
}

/** Attributes worth a glance on a timeline line (ids are in the header, not repeated). */
const SHOWN = [ATTR.outcome, ATTR.queueWaitMs, 'http.response.status_code', 'messaging.message.id'];

const ms = (n: number) => `${n.toFixed(1)} ms`.padStart(11);

/**
 * @returns the trace as text: a header, then one line per span, in start order under its parent (depth-first),
 *   with its start after the first span's, its duration, its service and its name; spans of a related trace
 *   (the payment's) follow under a line of their own. Workflow spans carry the workflow task's time (Temporal's
 *   deterministic clock), so they may start a little before the activity that runs in them.
 */
export function formatTimeline(t: OrderTrace): string {
  const start = earliest(t.spans);
  const placed = t.placedAfterMs === undefined ? '  (not placed yet)' : `  placed after ${t.placedAfterMs.toFixed(0)} ms`;
  const lines = [`order ${t.orderId}  trace ${t.traceId}${placed}${t.lastEvent ? `  last event ${t.lastEvent}` : ''}`];
  const traces = [t.traceId, ...new Set(t.spans.map((s) => s.traceId).filter((id) => id !== t.traceId))];
  for (const traceId of traces) {
    const spans = t.spans.filter((s) => s.traceId === traceId).sort((a, b) => a.startMs - b.startMs);
    if (traceId !== t.traceId) lines.push(`related trace ${traceId}`);
    const ids = new Set(spans.map((s) => s.spanId));
    const children = (parent: string | undefined) => spans.filter((s) => (parent === undefined ? !s.parentSpanId || !ids.has(s.parentSpanId) : s.parentSpanId === parent));
    const walk = (span: SpanLine, depth: number) => {
      const shown = SHOWN.filter((k) => span.attributes[k] !== undefined).map((k) => `${k.replace(/^.*\./, '')}=${String(span.attributes[k])}`);
      const error = span.error ? `  ERROR ${span.error}` : '';
      lines.push(`${ms(span.startMs - start)} ${ms(span.durationMs)}  ${span.service.padEnd(19)} ${'  '.repeat(depth)}${span.name}${shown.length ? `  ${shown.join(' ')}` : ''}${error}`);
      for (const child of children(span.spanId)) walk(child, depth + 1);
    };
    for (const root of children(undefined)) walk(root, 0);
  }
  return lines.join('\n');
}
