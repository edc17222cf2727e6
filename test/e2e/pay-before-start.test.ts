/**
 * Payments by signal and update from the 202 on, however far the drain is behind (docs/design.md, "Payments before
 * the start"), on the real API, PostgreSQL, Redis, Kafka and Temporal: the payment client (src/payments/client.ts)
 * sends `paid` with signal-with-start and `pay` with update-with-start while no worker polls and no starter runs.
 * Sent in time, both end PAID once the worker runs, though it first polls after their deadlines, one run per order, OrderPlaced and OrderPaid once each, no
 * refund, and the starter's later start changes nothing (I4). Sent after the deadline: refused, the unit back,
 * a refund event for the signal's money. An id naming no accepted order starts nothing. A payment whose receipt
 * the internal door stamped in time is PAID though Temporal received it after the deadline; a tampered receipt
 * vouches for nothing.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { startApi, type RunningApi } from '../../src/api/main';
import { newOrderId } from '../../src/order/orderId';
import type { Order } from '../../src/order/types';
import { internalDoorLookup, PaymentClient, type LookedUp } from '../../src/payments/client';
import { saleKeys } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { connectTemporal } from '../../src/workflows/client';
import { buyerToken, connectClients, createTestSale, orderRow, settledAudit, testConfig, until, type Clients } from '../support/helpers';
import { countByType, openEventTap, uniqueEvents, type EventTap } from '../support/kafka';
import { http } from '../support/openapi';
import { installTestRuntime } from '../support/temporalRuntime';

const PRICE = 3100;
const config = testConfig({ STARTER_IN_API: 'false', PAYMENT_RECEIPT_SECRET: `receipt-secret-of-this-suite-${'x'.repeat(16)}` });
const run = randomUUID().slice(0, 8);
let clients: Clients;
let temporal: Client;
let tap: EventTap;
let api: RunningApi;
let worker: RunningWorker | undefined;
let payments: PaymentClient;

beforeAll(async () => {
  installTestRuntime();
  clients = connectClients(config);
  tap = await openEventTap(config);
  temporal = await connectTemporal(config);
  api = await startApi(config);
  payments = new PaymentClient(temporal, { taskQueue: config.TEMPORAL_TASK_QUEUE, lookUp: internalDoorLookup(api.internalUrl, config.PAYMENT_SERVICE_TOKEN, 10_000), callTimeoutMs: 90_000 });
}, 120_000);

afterAll(async () => {
  await Promise.allSettled([api?.close(), worker?.shutdown()]);
  await Promise.allSettled([temporal?.connection.close(), tap?.close(), clients?.close()]);
});

/** @returns the order id of a 202 to buyer's press on the sale's one item */
async function press(sale: Sale, buyer: string): Promise<string> {
  const reply = await http(api.url)('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, buyer) });
  expect(reply.status).toBe(202);
  return reply.body.orderId as string;
}

/** @returns the order's runs, once visibility lists at least one */
const runsOf = async (orderId: string) => {
  await until(`${orderId} listed`, async () => (await temporal.workflow.count(`WorkflowId = '${orderId}'`)).count > 0);
  const runs = [];
  for await (const execution of temporal.workflow.list({ query: `WorkflowId = '${orderId}'` })) runs.push(execution.runId);
  return runs.length;
};

const freeUnits = (sale: Sale) => clients.redis.llen(saleKeys(sale.saleId).stock(sale.items[0].itemId));

test('sent in time with no worker and no starter: both PAID once the worker runs past their deadline, one run each, events once, no refund; the starter’s later start changes nothing', async () => {
  const sale = await createTestSale(clients, { quantities: [3], priceMinor: PRICE, paymentWindowMs: 10_000 });
  const bySignal = await press(sale, `signal-${run}`);
  const byUpdate = await press(sale, `update-${run}`);

  expect(await payments.signalPaid(bySignal, { paymentId: `s-${bySignal}`, amount: PRICE })).toEqual({ signalled: true });
  const updated = payments.pay(byUpdate, { paymentId: `u-${byUpdate}`, amount: PRICE });
  // A bad or forged id: refused before Temporal, nothing started, nothing stored.
  const forged = newOrderId(sale.saleId);
  expect(await payments.signalPaid(forged, { paymentId: `f-${forged}`, amount: PRICE })).toEqual({ error: 'ORDER_NOT_FOUND' });
  expect(await payments.pay(forged, { paymentId: `g-${forged}`, amount: PRICE })).toEqual({ error: 'ORDER_NOT_FOUND' });
  expect(await payments.pay('not-an-order', { paymentId: 'h', amount: PRICE })).toEqual({ error: 'ORDER_NOT_FOUND' });
  await expect(temporal.workflow.getHandle(forged).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
  expect(await orderRow(clients.pool, forged)).toBeUndefined();
  // Nothing has run the payments yet: the workflows wait for a worker.
  expect(await orderRow(clients.pool, bySignal)).toBeUndefined();

  // The worker first polls after both deadlines: each payment is judged when Temporal received it.
  const bundle = await buildWorkflowBundle();
  const deadlines = await Promise.all([bySignal, byUpdate].map(async (id) => (await http(api.url)('GET', `/api/flash-sales/orders/${id}`, { token: await buyerToken(config, id === bySignal ? `signal-${run}` : `update-${run}`) })).body.paymentDeadline as string));
  await until('both deadlines passed', async () => deadlines.every((d) => Date.now() > Date.parse(d) + 500));
  worker = await startWorker(config, bundle);
  expect(await updated).toEqual({ status: 'PAID', paymentId: `u-${byUpdate}` });
  const signalResult: Order = await temporal.workflow.getHandle(bySignal).result();
  expect(signalResult).toMatchObject({ status: 'PAID', paymentId: `s-${bySignal}` });
  expect(await temporal.workflow.getHandle(byUpdate).result()).toMatchObject({ status: 'PAID', paymentId: `u-${byUpdate}` });

  // The starter comes round to both entries: its starts find each order's one run and change nothing (I4).
  const drain = await startApi({ ...config, STARTER_IN_API: true });
  try {
    await until('the start queue drained', async () => (await clients.redis.xlen(saleKeys(sale.saleId).startQueue)) === 0);
  } finally {
    await drain.close();
  }
  for (const orderId of [bySignal, byUpdate]) {
    expect(await runsOf(orderId)).toBe(1);
    expect(await orderRow(clients.pool, orderId)).toMatchObject({ status: 'PAID' });
    const seen = uniqueEvents(await tap.collect([orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
    expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  }
  expect(await freeUnits(sale)).toBe(1);
  // A paid order's payment sent again through either path answers as the first time.
  expect(await payments.pay(bySignal, { paymentId: `s-${bySignal}`, amount: PRICE })).toEqual({ status: 'PAID', paymentId: `s-${bySignal}` });
  expect(await payments.signalPaid(byUpdate, { paymentId: `other-${byUpdate}`, amount: PRICE })).toEqual({ ended: { error: 'ORDER_NOT_PENDING' } });
  expect(await settledAudit(config, clients, temporal, sale.saleId, [bySignal, byUpdate])).toEqual([]);
});

test('a `paid` signal ahead of the drain: its run waits, a worker polling, for the starter’s turn, then ends PAID before the deadline', async () => {
  worker ??= await startWorker(config, await buildWorkflowBundle());
  const sale = await createTestSale(clients, { quantities: [1], priceMinor: PRICE, paymentWindowMs: 120_000 });
  const orderId = await press(sale, `ahead-${run}`);
  expect(await payments.signalPaid(orderId, { paymentId: `s-${orderId}`, amount: PRICE })).toEqual({ signalled: true });
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const handle = temporal.workflow.getHandle(orderId);
  const { events } = await handle.fetchHistory();
  // The payment is in the history; no workflow task has run, no row is stored: the run keeps off the cores.
  expect(events?.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'paid')).toBe(true);
  expect(events?.some((e) => e.workflowTaskStartedEventAttributes)).toBe(false);
  expect(await orderRow(clients.pool, orderId)).toBeUndefined();

  const drain = await startApi({ ...config, STARTER_IN_API: true });
  try {
    expect(await handle.result()).toMatchObject({ status: 'PAID', paymentId: `s-${orderId}` });
  } finally {
    await drain.close();
  }
  expect(Date.now()).toBeLessThan((await orderRow(clients.pool, orderId))?.deadlineAt.getTime() ?? 0);
  expect(await runsOf(orderId)).toBe(1);
  expect(countByType(uniqueEvents(await tap.collect([orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') })))).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
});

test('sent after the deadline: refused, the unit back, a refund event for the signal’s money and none for the update', async () => {
  worker ??= await startWorker(config, await buildWorkflowBundle());
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: PRICE, paymentWindowMs: 1500 });
  const bySignal = await press(sale, `late-signal-${run}`);
  const byUpdate = await press(sale, `late-update-${run}`);
  await new Promise((resolve) => setTimeout(resolve, 2500));

  expect(await payments.signalPaid(bySignal, { paymentId: `s-${bySignal}`, amount: PRICE })).toEqual({ signalled: true });
  expect(await payments.pay(byUpdate, { paymentId: `u-${byUpdate}`, amount: PRICE })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  for (const orderId of [bySignal, byUpdate]) expect(await temporal.workflow.getHandle(orderId).result()).toMatchObject({ status: 'EXPIRED' });
  await until('both units back', async () => (await freeUnits(sale)) === 2);

  const signalled = uniqueEvents(await tap.collect([bySignal], { until: (es) => es.some((e) => e.type === 'PaymentRefundRequired') }));
  expect(countByType(signalled)).toEqual({ OrderPlaced: 1, OrderExpired: 1, PaymentRefundRequired: 1 });
  expect(signalled.find((e) => e.type === 'PaymentRefundRequired')).toMatchObject({ paymentId: `s-${bySignal}`, amount: PRICE, reason: 'PAYMENT_WINDOW_CLOSED' });
  expect(countByType(uniqueEvents(await tap.collect([byUpdate], { until: (es) => es.some((e) => e.type === 'OrderExpired') })))).toEqual({ OrderPlaced: 1, OrderExpired: 1 });
  // The workflow has ended: the same payments again meet what they met, without a second run.
  expect(await payments.signalPaid(bySignal, { paymentId: `s-${bySignal}`, amount: PRICE })).toEqual({ ended: { error: 'PAYMENT_WINDOW_CLOSED' } });
  expect(await payments.pay(byUpdate, { paymentId: `u-${byUpdate}`, amount: PRICE })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect(await runsOf(bySignal)).toBe(1);
  expect(await settledAudit(config, clients, temporal, sale.saleId, [bySignal, byUpdate])).toEqual([]);
});

test('a receipt stamped before the deadline: PAID though Temporal received the payment after it; a tampered one: refused', async () => {
  worker ??= await startWorker(config, await buildWorkflowBundle());
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: PRICE, paymentWindowMs: 3000 });
  const bySignal = await press(sale, `receipt-signal-${run}`);
  const byUpdate = await press(sale, `receipt-update-${run}`);
  const signalPayment = { paymentId: `s-${bySignal}`, amount: PRICE };
  const updatePayment = { paymentId: `u-${byUpdate}`, amount: PRICE };
  const door = internalDoorLookup(api.internalUrl, config.PAYMENT_SERVICE_TOKEN, 10_000);
  const stamped = await door(bySignal, signalPayment);
  const forged = await door(byUpdate, updatePayment);
  expect(stamped?.receipt?.atMs).toBeLessThan(Date.parse(stamped?.order.paymentDeadline as string));
  // The door stamps only a payment it is asked about, and refuses a query it does not know.
  for (const query of ['', '?paymentId=x', '?amount=5']) {
    const plain = await http(api.internalUrl)('GET', `/api/flash-sales/orders/${bySignal}/payment${query}`, { token: config.PAYMENT_SERVICE_TOKEN });
    expect({ query, status: plain.status, receipt: plain.headers.get('payment-receipt') }).toEqual({ query, status: 200, receipt: null });
  }
  for (const query of ['?paymentId=x&amount=-1', '?paymentId=x&amount=', '?paymentId=x&amount=5&other=1', '?paymentId=x&paymentId=y&amount=5', '?paymentId=%00&amount=5']) {
    const refused = await http(api.internalUrl)('GET', `/api/flash-sales/orders/${bySignal}/payment${query}`, { token: config.PAYMENT_SERVICE_TOKEN });
    expect({ query, status: refused.status, error: refused.body.error }).toEqual({ query, status: 400, error: 'INVALID_QUERY' });
  }

  // Temporal's intake lagging the payment service: both payments reach it after the deadline, with the
  // receipts stamped before it (no starter runs, so each payment starts its order's workflow).
  await until('the deadline passed', async () => Date.now() > Date.parse(stamped?.order.paymentDeadline as string) + 500);
  const via = (found: LookedUp | undefined) => new PaymentClient(temporal, { taskQueue: config.TEMPORAL_TASK_QUEUE, lookUp: async () => found, callTimeoutMs: 90_000 });
  expect(await via(stamped).signalPaid(bySignal, signalPayment)).toEqual({ signalled: true });
  const tampered = forged && { ...forged, receipt: { atMs: (forged.receipt?.atMs as number) - 1, mac: forged.receipt?.mac as string } };
  expect(await via(tampered).pay(byUpdate, updatePayment)).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });

  expect(await temporal.workflow.getHandle(bySignal).result()).toMatchObject({ status: 'PAID', paymentId: signalPayment.paymentId });
  expect(await temporal.workflow.getHandle(byUpdate).result()).toMatchObject({ status: 'EXPIRED' });
  expect(countByType(uniqueEvents(await tap.collect([bySignal], { until: (es) => es.some((e) => e.type === 'OrderPaid') })))).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  await until('the expired unit back', async () => (await freeUnits(sale)) === 1);
  expect(await settledAudit(config, clients, temporal, sale.saleId, [bySignal, byUpdate])).toEqual([]);
});
