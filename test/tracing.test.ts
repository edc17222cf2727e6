/**
 * Traces end to end (src/tracing/index.ts): the API, a starter and a worker run as processes, as an operator runs
 * them, with tracing on and each writing its spans as JSON lines. One purchase, then its payment from a
 * "payment service" with a trace of its own. The order's trace must hold the purchase request, the reservation,
 * the start (in the starter, the child of the reservation through the start queue entry), the workflow run and
 * each local activity (in the worker, through Temporal's headers) and the Kafka publish (whose context the
 * message carries); the payment's span must link to that trace and carry its own into the workflow's signal.
 * The traced workflow's history replays on the untraced bundle. And the OTLP exporter: an API process sends its spans to the collector endpoint it is given.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from '@temporalio/worker';
import { connectTemporal } from '../src/workflows/client';
import type { SpanLine } from '../src/tracing';
import { readSpanFiles } from '../src/tracing/timeline';
import { saleGateOf } from './support/crowd';
import { freePort, startChild, type Child } from './support/processes';
import { buyerToken, connectClients, createTestSale, orderResult, testConfig, until, type Clients } from './support/helpers';
import { openEventTap, type EventTap } from './support/kafka';
import { installTestRuntime } from './support/temporalRuntime';

jest.setTimeout(180_000);

const config = testConfig();
const children: Child[] = [];
let clients: Clients;
let tap: EventTap;
beforeAll(async () => {
  // The replay's worker logs through Jest's console, not around its output.
  installTestRuntime();
  clients = connectClients(config);
  tap = await openEventTap(config);
});
afterAll(async () => {
  await Promise.allSettled(children.map((c) => c.stop()));
  await tap.close();
  await clients.close();
});

const SERVER = 1;
const PRODUCER = 3;

test('one purchase is one trace across the API, the starter and the worker; the payment links to it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'traces-'));
  const [apiPort, internalPort] = [await freePort(), await freePort()];
  const files = { api: join(dir, 'api.jsonl'), starter: join(dir, 'starter.jsonl'), worker: join(dir, 'worker.jsonl') };
  const taskQueue = `traces-${randomUUID()}`;
  const env = (role: keyof typeof files) => ({
    ...process.env,
    API_PORT: String(apiPort),
    INTERNAL_API_PORT: String(internalPort),
    STARTER_IN_API: 'false',
    TEMPORAL_TASK_QUEUE: taskQueue,
    OTEL_TRACES_EXPORTER: 'jsonl',
    OTEL_TRACES_FILE: files[role],
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
  const api = startChild('api', 'dist/api/main.js', env('api'), join(dir, 'api.log'), 'api listening');
  const starter = startChild('starter', 'dist/starter/main.js', env('starter'), join(dir, 'starter.log'), 'starter running');
  const worker = startChild('worker', 'dist/worker/main.js', env('worker'), join(dir, 'worker.log'), 'worker running');
  children.push(api, starter, worker);
  await Promise.all(children.map((c) => c.ready));

  const baseUrl = `http://127.0.0.1:${apiPort}`;
  const sale = await createTestSale(clients, { quantities: [3] });
  const gate = await saleGateOf(baseUrl, sale.saleId, Date.now() + 30_000);
  // The buyer's client sends a sampled traceparent of its own: linked to, never the order's parent.
  const buyer = `traces-${randomUUID()}`;
  const client = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
  const bought = await fetch(`${baseUrl}/api/flash-sales/items/${sale.items[0].itemId}/purchase`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await buyerToken(config, buyer)}`, 'sale-gate': gate, traceparent: `00-${client.traceId}-${client.spanId}-01` },
  });
  expect(bought.status).toBe(202);
  const { orderId } = (await bought.json()) as { orderId: string };
  // The payment service's own trace, as its W3C traceparent header, on the internal door.
  const payment = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
  const temporal = await connectTemporal(config);
  try {
    // The workflow has run its first task (placeOrder's marker is in its history) before the payment: one run of
    // each task to check.
    await until(`the first task of ${orderId}`, async () => {
      const history = await temporal.workflow.getHandle(orderId).fetchHistory().catch(() => undefined);
      return history?.events?.some((e) => e.markerRecordedEventAttributes) ?? false;
    });

    const paid = await fetch(`http://127.0.0.1:${internalPort}/api/flash-sales/orders/${orderId}/payment`, {
      method: 'POST',
      headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json', traceparent: `00-${payment.traceId}-${payment.spanId}-01` },
      body: JSON.stringify({ paymentId: `pay-${orderId}`, amount: sale.items[0].priceMinor }),
    });
    expect(paid.status).toBe(200);
    expect((await orderResult(temporal, orderId)).status).toBe('PAID');
    // Tracing may be switched off by a deploy in the middle of a sale: the traced workflow's history replays on
    // the plain bundle `npm run build` wrote (the interceptors add no command).
    const history = await temporal.workflow.getHandle(orderId).fetchHistory();
    const plain = join(__dirname, '..', 'dist', 'workflow-bundle.js');
    await expect(Worker.runReplayHistory({ workflowBundle: { codePath: plain } }, history)).resolves.toBeUndefined();
  } finally {
    await temporal.connection.close();
  }
  const placedEvent = `${orderId}:OrderPlaced`;
  await tap.collect([orderId], { until: () => tap.headersOf(placedEvent) !== undefined });
  // SIGTERM: each process exports the spans it still buffers before it exits.
  await Promise.all(children.map((c) => c.stop()));

  const spans = readSpanFiles(Object.values(files));
  const one = (name: string, where: (s: SpanLine) => boolean = () => true) => {
    const found = spans.filter((s) => s.name === name && where(s));
    expect(found.map((s) => s.name)).toEqual([name]);
    return found[0];
  };
  const childOf = (parent: SpanLine) => (s: SpanLine) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId;

  // API → starter → worker, each a child of the one before, in one trace.
  const request = one('POST /api/flash-sales/items/:itemId/purchase');
  expect(request).toMatchObject({ service: 'flash-sale-api', kind: SERVER, attributes: { 'http.response.status_code': 202 }, links: [client] });
  expect(request.parentSpanId).toBeUndefined();
  expect(request.traceId).not.toBe(client.traceId);
  const reserve = one('reserve', childOf(request));
  expect(reserve.attributes).toMatchObject({ 'flash_sale.order_id': orderId, 'flash_sale.outcome': 'RESERVED' });
  const start = one('start order', childOf(reserve));
  expect(start.service).toBe('flash-sale-starter');
  expect(start.attributes['flash_sale.start_queue.wait_ms']).toEqual(expect.any(Number));
  const startCall = one('StartWorkflow:orderWorkflow', childOf(start));
  const run = one('RunWorkflow:orderWorkflow', childOf(startCall));
  expect(run).toMatchObject({ service: 'flash-sale-worker', attributes: { workflowId: orderId, workflowType: 'orderWorkflow' } });
  // The workflow's identity only: no search attribute, so no buyer id, in any span.
  expect(spans.filter((s) => JSON.stringify(s).includes(buyer)).map((s) => s.name)).toEqual([]);

  // Each local activity the workflow ran: scheduled in the workflow's span, run in the scheduling span.
  const order = spans.filter((s) => s.traceId === request.traceId);
  const scheduled = order.filter(childOf(run)).filter((s) => s.name.startsWith('StartActivity:'));
  expect(scheduled.map((s) => s.name)).toContain('StartActivity:placeOrder');
  for (const s of scheduled) one(s.name.replace('StartActivity:', 'RunActivity:'), childOf(s));
  const placeOrder = one('RunActivity:placeOrder', (s) => s.traceId === request.traceId);

  expect(placeOrder.service).toBe('flash-sale-worker');

  // The OrderPlaced event: the starter's store wrote it into the outbox with the row, so its publish span (the
  // relay's, in the worker) is the child of the starter's span, and the message carries that span's context.
  const publish = one(`publish ${config.KAFKA_TOPIC}`, (s) => s.attributes['messaging.message.id'] === placedEvent);
  expect(publish).toMatchObject({ kind: PRODUCER, parentSpanId: start.spanId, traceId: request.traceId, service: 'flash-sale-worker' });
  expect(tap.headersOf(placedEvent)?.traceparent).toBe(`00-${publish.traceId}-${publish.spanId}-01`);

  // The payment: in the payment service's trace, linked to the span that stored the order (the starter's, which
  // stores it before the start); its signal carries that trace into the workflow, where the payment's activity runs.
  const payRequest = one('POST /api/flash-sales/orders/:orderId/payment');
  expect(payRequest).toMatchObject({ traceId: payment.traceId, parentSpanId: payment.spanId });
  expect(payRequest.links).toEqual([{ traceId: request.traceId, spanId: start.spanId }]);
  const signal = one('SignalWorkflow:paid', childOf(payRequest));
  const handled = one('HandleSignal:paid', childOf(signal));
  expect(handled.service).toBe('flash-sale-worker');
  one('RunActivity:payOrder', (s) => s.traceId === payment.traceId);
});

test('with OTEL_TRACES_EXPORTER=otlp, the API sends its spans to the collector OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names', async () => {
  // A stand-in collector: it keeps every OTLP/HTTP (JSON) body it is sent, as a collector's receiver would take it.
  const bodies: unknown[] = [];
  const collector = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      bodies.push({ path: req.url, contentType: req.headers['content-type'], body: JSON.parse(body) as unknown });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  collector.listen(0, '127.0.0.1');
  await once(collector, 'listening');
  try {
    const dir = mkdtempSync(join(tmpdir(), 'otlp-'));
    const apiPort = await freePort();
    const env = {
      ...process.env,
      API_PORT: String(apiPort),
      INTERNAL_API_PORT: '0',
      STARTER_IN_API: 'false',
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`,
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_SERVICE_NAME: 'flash-sale-api-otlp-test',
    };
    const api = startChild('api', 'dist/api/main.js', env, join(dir, 'api.log'), 'api listening');
    children.push(api);
    await api.ready;
    const caller = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
    const answer = await fetch(`http://127.0.0.1:${apiPort}/api/flash-sales/time`, { headers: { traceparent: `00-${caller.traceId}-${caller.spanId}-01` } });
    expect(answer.status).toBe(200);
    type OtlpSpan = { traceId: string; parentSpanId?: string; name: string; links?: { traceId: string; spanId: string }[] };
    type Export = { path: string; body: { resourceSpans: { resource: { attributes: { key: string; value: { stringValue?: string } }[] }; scopeSpans: { spans: OtlpSpan[] }[] }[] } };
    const sent = await until('the span at the collector', async () => {
      for (const e of bodies as Export[]) {
        for (const rs of e.body.resourceSpans) {
          const span = rs.scopeSpans.flatMap((s) => s.spans).find((s) => s.links?.some((l) => l.traceId === caller.traceId));
          if (span) return { path: e.path, service: rs.resource.attributes.find((a) => a.key === 'service.name')?.value.stringValue, span };
        }
      }
      return undefined;
    });
    // A buyer route: the caller's context is a link, the span a root of its own.
    expect(sent).toMatchObject({ path: '/v1/traces', service: 'flash-sale-api-otlp-test', span: { name: 'GET /api/flash-sales/time', links: [{ traceId: caller.traceId, spanId: caller.spanId }] } });
    expect(sent.span.traceId).not.toBe(caller.traceId);
    expect(sent.span.parentSpanId ?? '').toBe('');
  } finally {
    collector.close();
  }
});
