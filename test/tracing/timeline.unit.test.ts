/**
 * The development view's timeline (src/tracing/timeline.ts), pure logic over made-up spans: an order's trace is
 * found by its reserve span's order id, with the payment's trace that links to it or names the order; the
 * slowest is the one whose placeOrder activity ended latest after its purchase began; the text nests each span
 * under its parent and names the order's last event.
 */
import type { SpanLine } from '../../src/tracing';
import { formatTimeline, orderTraces, slowestOrder } from '../../src/tracing/timeline';

const span = (traceId: string, spanId: string, name: string, startMs: number, durationMs: number, more: Partial<SpanLine> = {}): SpanLine => ({
  traceId,
  spanId,
  name,
  kind: 0,
  service: 'flash-sale-api',
  startMs,
  durationMs,
  attributes: {},
  links: [],
  ...more,
});

/** An order's trace: the request at t0, the workflow's placeOrder ending placedAfterMs later. */
function order(traceId: string, orderId: string, t0: number, placedAfterMs: number): SpanLine[] {
  return [
    span(traceId, `${traceId}-req`, 'POST /api/flash-sales/items/:itemId/purchase', t0, 8),
    span(traceId, `${traceId}-res`, 'reserve', t0 + 2, 3, { parentSpanId: `${traceId}-req`, attributes: { 'flash_sale.order_id': orderId, 'flash_sale.outcome': 'RESERVED' } }),
    span(traceId, `${traceId}-start`, 'start order', t0 + 100, 20, { parentSpanId: `${traceId}-res`, service: 'flash-sale-starter' }),
    span(traceId, `${traceId}-run`, 'RunActivity:placeOrder', t0 + placedAfterMs - 30, 30, { parentSpanId: `${traceId}-start`, service: 'flash-sale-worker' }),
  ];
}

const payment = [
  span('p1', 'p1-req', 'POST /api/flash-sales/orders/:orderId/payment', 10_000, 50, { links: [{ traceId: 't2', spanId: 't2-run' }] }),
  span('p1', 'p1-sig', 'SignalWorkflow:paid', 10_020, 20, { parentSpanId: 'p1-req' }),
];
const spans = [...order('t1', 'order-1', 1_000, 400), ...order('t2', 'order-2', 1_100, 9_000), ...payment, span('t3', 't3-x', 'GET /api/flash-sales/time', 5, 1)];

test('each order is found by its reservation, with the trace that links to it; a trace without one is none', () => {
  const traces = orderTraces(spans);
  expect(traces.map((t) => [t.orderId, t.traceId, t.spans.length, t.placedAfterMs])).toEqual([
    ['order-1', 't1', 4, 400],
    ['order-2', 't2', 6, 9_000],
  ]);
});

test('the slowest order is the one placed longest after its purchase; none when no order was placed', () => {
  expect(slowestOrder(orderTraces(spans))?.orderId).toBe('order-2');
  expect(slowestOrder(orderTraces(spans.filter((s) => !s.name.startsWith('RunActivity'))))).toBeUndefined();
});

test('the timeline nests spans under their parents, offsets from the first span, and the linked trace after', () => {
  const text = formatTimeline(orderTraces(spans)[1]);
  expect(text.split('\n')).toEqual([
    'order order-2  trace t2  placed after 9000 ms',
    '     0.0 ms      8.0 ms  flash-sale-api      POST /api/flash-sales/items/:itemId/purchase',
    '     2.0 ms      3.0 ms  flash-sale-api        reserve  outcome=RESERVED',
    '   100.0 ms     20.0 ms  flash-sale-starter      start order',
    '  8970.0 ms     30.0 ms  flash-sale-worker         RunActivity:placeOrder',
    'related trace p1',
    '  8900.0 ms     50.0 ms  flash-sale-api      POST /api/flash-sales/orders/:orderId/payment',
    '  8920.0 ms     20.0 ms  flash-sale-api        SignalWorkflow:paid',
  ]);
});

test("a trace that only names the order (a signal from a sender that does not trace) is the order's too, and its last event heads the timeline", () => {
  const signal = [
    span('s1', 's1-handle', 'HandleSignal:paid', 12_000, 30, { service: 'flash-sale-worker', attributes: { workflowId: 'order-1' } }),
    span('s1', 's1-publish', 'publish flash-sale-orders', 12_010, 5, { parentSpanId: 's1-handle', kind: 3, attributes: { 'messaging.message.id': 'order-1:OrderPaid', 'flash_sale.order_id': 'order-1' } }),
  ];
  const placedEvent = span('t1', 't1-publish', 'publish flash-sale-orders', 1_380, 5, { parentSpanId: 't1-run', kind: 3, attributes: { 'messaging.message.id': 'order-1:OrderPlaced' } });
  const [first] = orderTraces([...spans, ...signal, placedEvent]);
  expect(first).toMatchObject({ orderId: 'order-1', lastEvent: 'OrderPaid' });
  expect(first.spans.map((s) => s.spanId)).toEqual(expect.arrayContaining(['s1-handle', 's1-publish']));
  expect(formatTimeline(first).split('\n')[0]).toBe('order order-1  trace t1  placed after 400 ms  last event OrderPaid');
  expect(orderTraces([...spans, ...signal])[1].spans.map((s) => s.traceId)).not.toContain('s1');
});
