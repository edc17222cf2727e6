/**
 * orderWorkflow on the time-skipping test server with the real activities (PostgreSQL, Redis, Kafka): the
 * 10-minute payment window passes in simulated time. Each order's unit is reserved in Redis first, as the
 * purchase route does, so a release has something to give back.
 *
 * The time-skipping server knows no custom search attributes: starting a workflow with OrderStatus fails
 * (INVALID_ARGUMENT "search attribute OrderStatus is not defined") and an upsert fails every workflow task
 * (BadSearchAttributes) so the workflow hangs. createTimeSkipping has no searchAttributes option (only the dev
 * server's does), but the test server implements OperatorService.AddSearchAttributes, so they are registered
 * through env.connection.operatorService before any workflow starts. It does not implement ListSearchAttributes
 * nor visibility queries; describe() does return the current search attributes.
 *
 * PostgreSQL decides payments by its own clock (the wall clock), which the test server's skipping does not move:
 * a payment in skipped time is inside the window for PostgreSQL unless the timer's expiry came first, so these
 * tests show the workflow's logic, and test/e2e/deadline-race.test.ts the clocks.
 *
 * Events are compared after dropping redelivered copies by eventId, as a consumer does (I5): when a timer
 * fires while the worker completes a signal's workflow task, the server fails that task (UnhandledCommand) and
 * the local activities run again on the retry, so OrderPaid can reach Kafka twice with one eventId.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { createActivities } from '../../src/activities';
import type { OrderInput, Order } from '../../src/order/types';
import { createKafka } from '../../src/infra/kafka';
import { createLogger } from '../../src/infra/logger';
import { OutboxRelay } from '../../src/order/outbox';
import { EventPublisher } from '../../src/order/publisher';
import { saleKeys } from '../../src/reservation/layout';
import { startOrderWorkflow } from '../../src/workflows/client';
import { OrderStatusKey, paidSignal, statusQuery } from '../../src/workflows/definitions';
import { type Clients, connectClients, createTestSale, orderRow, testConfig } from '../support/helpers';
import { countByType, openEventTap, uniqueEvents, type EventTap } from '../support/kafka';
import { timeSkippingEnvironment } from '../support/temporalRuntime';
import { newOrderId } from '../../src/order/orderId';

const WINDOW_MS = 600_000;
const PRICE = 1999;

const config = testConfig();
let env: TestWorkflowEnvironment;
let clients: Clients;
let events: EventPublisher;
let relay: OutboxRelay;
let tap: EventTap;
let bundle: WorkflowBundleWithSourceMap;
let worker: Worker;
let running: Promise<void>;

function workerOn(taskQueue: string): Promise<Worker> {
  return Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: bundle,
    activities: createActivities({ orders: clients.orders, reservations: clients.store }),
  });
}

beforeAll(async () => {
  env = await timeSkippingEnvironment();
  clients = connectClients(config);
  events = await EventPublisher.connect(createKafka(config, 'test-timeskipping'), config.KAFKA_TOPIC);
  relay = new OutboxRelay(clients.pool, events, createLogger('silent', 'relay'));
  relay.start();
  tap = await openEventTap(config);
  bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: new DefaultLogger('WARN') });
  worker = await workerOn(config.TEMPORAL_TASK_QUEUE);
  running = worker.run();
}, 120_000);

afterAll(async () => {
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await relay?.stop();
  await Promise.allSettled([tap?.close(), events?.disconnect(), clients?.close()]);
  await env?.teardown();
});

/** A sale of `quantity` units with one unit reserved in Redis for a new order, which holds it; the order is not started. */
async function reservedOrder(quantity = 10): Promise<OrderInput> {
  const sale = await createTestSale(clients, { quantities: [quantity], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const order: OrderInput = {
    orderId: newOrderId(sale.saleId),
    saleId: sale.saleId,
    itemId: sale.items[0].itemId,
    userId: `buyer-${randomUUID()}`,
    priceMinor: PRICE,
    paymentWindowMs: WINDOW_MS,
    // The test server's clock, which earlier tests have skipped ahead of the wall clock.
    reservedAtMs: await env.currentTimeMs(),
  };
  const outcome = await clients.store.reserve(order);
  expect(outcome).toEqual({ kind: 'RESERVED', stockLeft: quantity - 1, stockShard: 0, unit: 1, stockEpoch: 1 });
  return { ...order, unit: 1, stockShard: 0, stockEpoch: 1 };
}

async function start(order: OrderInput, taskQueue = config.TEMPORAL_TASK_QUEUE): Promise<WorkflowHandle> {
  await startOrderWorkflow(env.client, taskQueue, order);
  return env.client.workflow.getHandle(order.orderId);
}

/** What PostgreSQL and Redis say about the order and its item (sold: the item's live orders, a unit each). */
async function state(order: OrderInput) {
  const keys = saleKeys(order.saleId);
  const [row, item, stock, reservation, buyer] = await Promise.all([
    orderRow(clients.pool, order.orderId),
    clients.pool.query<{ sold: number }>(`SELECT count(*)::int AS sold FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`, [order.itemId]),
    clients.store.view.stock(order.saleId, [order.itemId]),
    clients.redis.hget(keys.reservations, order.orderId),
    clients.redis.hget(keys.buyers, order.userId),
  ]);
  return { row, sold: item.rows[0].sold, stock: stock.get(order.itemId), reservation, buyer };
}

async function waitForRow(orderId: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await orderRow(clients.pool, orderId)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`order ${orderId} never reached PostgreSQL`);
}

async function orderStatusAttribute(handle: WorkflowHandle): Promise<unknown> {
  return (await handle.describe()).typedSearchAttributes.get(OrderStatusKey);
}

test('an unpaid order expires after the 10-minute window: unit back in Redis and PostgreSQL, OrderExpired', async () => {
  const order = await reservedOrder(10);
  const handle = await start(order);
  await waitForRow(order.orderId);

  // The window runs from the reservation (the 202), whenever the workflow first runs.
  const pending = await handle.query(statusQuery);
  expect(pending).toMatchObject({ orderId: order.orderId, status: 'PENDING', priceMinor: PRICE });
  expect(Date.parse(pending.paymentDeadline)).toBe(order.reservedAtMs + WINDOW_MS);
  expect(await orderStatusAttribute(handle)).toBe('PENDING');

  const view: Order = await handle.result(); // the server skips the 10 minutes
  expect(view.status).toBe('EXPIRED');
  expect(await env.currentTimeMs()).toBeGreaterThanOrEqual(Date.parse(view.paymentDeadline));
  expect(await handle.query(statusQuery)).toEqual(view);
  expect(await orderStatusAttribute(handle)).toBe('EXPIRED');

  const after = await state(order);
  expect(after.row).toMatchObject({ status: 'EXPIRED', paymentId: null });
  expect(after.row?.deadlineAt.toISOString()).toBe(view.paymentDeadline);
  expect(after.sold).toBe(0);
  expect(after.stock).toBe(10);
  expect(after.reservation).toBeNull();
  expect(after.buyer).toBeNull();

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderExpired') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderExpired: 1 });
  expect(seen.find((e) => e.type === 'OrderExpired')).toMatchObject({
    eventId: `${order.orderId}:OrderExpired`,
    saleId: order.saleId,
    itemId: order.itemId,
    userId: order.userId,
  });
});

test('paid by signal at 9:59 the order is PAID and nothing is released', async () => {
  const order = await reservedOrder(10);
  const startedAt = await env.currentTimeMs();
  const handle = await start(order);
  await waitForRow(order.orderId);

  await env.sleep(startedAt + WINDOW_MS - 1000 - (await env.currentTimeMs()));
  expect(await env.currentTimeMs()).toBeLessThan(startedAt + WINDOW_MS);
  expect((await handle.query(statusQuery)).status).toBe('PENDING');
  expect(await orderStatusAttribute(handle)).toBe('PENDING');
  await handle.signal(paidSignal, { paymentId: `pay-${order.orderId}`, amount: PRICE });

  const view: Order = await handle.result();
  expect(view).toMatchObject({ status: 'PAID', paymentId: `pay-${order.orderId}` });
  expect(await orderStatusAttribute(handle)).toBe('PAID');

  const after = await state(order);
  expect(after.row).toMatchObject({ status: 'PAID', paymentId: `pay-${order.orderId}` });
  expect(after.sold).toBe(1);
  expect(after.stock).toBe(9);
  expect(after.reservation).not.toBeNull();
  expect(after.buyer).toBe(order.orderId);

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ paymentId: `pay-${order.orderId}`, amount: PRICE });
});

test('a payment exactly at the deadline has exactly one outcome: PAID kept, or EXPIRED released once and refunded', async () => {
  const order = await reservedOrder(10);
  const paymentId = `pay-${order.orderId}`;
  const handle = await start(order);
  await waitForRow(order.orderId);
  // Sleep to the workflow's deadline (10 minutes after the reservation), to the millisecond.
  const { paymentDeadline } = await handle.query(statusQuery);
  await env.sleep(Date.parse(paymentDeadline) - (await env.currentTimeMs()));
  let signalRefused = false;
  try {
    await handle.signal(paidSignal, { paymentId, amount: PRICE });
  } catch (err) {
    // The workflow may already have finished its compensation and completed: the payment service is told.
    expect(err).toBeInstanceOf(WorkflowNotFoundError);
    signalRefused = true;
  }

  const view: Order = await handle.result();
  const after = await state(order);
  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired') }));
  const refunds = seen.filter((e) => e.type === 'PaymentRefundRequired');

  expect(['PAID', 'EXPIRED']).toContain(view.status);
  expect(after.row?.status).toBe(view.status);
  expect(await orderStatusAttribute(handle)).toBe(view.status);
  if (view.status === 'PAID') {
    expect(signalRefused).toBe(false);
    expect(after.row?.paymentId).toBe(paymentId);
    expect(after).toMatchObject({ sold: 1, stock: 9, buyer: order.orderId });
    expect(after.reservation).not.toBeNull();
    expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  } else {
    expect(after.row?.paymentId).toBeNull();
    expect(after).toMatchObject({ sold: 0, stock: 10, reservation: null, buyer: null });
    if (signalRefused) {
      expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderExpired: 1 });
    } else {
      expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderExpired: 1, PaymentRefundRequired: 1 });
      expect(refunds[0]).toMatchObject({ paymentId, amount: PRICE, reason: 'PAYMENT_WINDOW_CLOSED' });
    }
  }
});

test('a duplicated paid signal has one effect; another payment for a paid order is refunded (ORDER_NOT_PENDING)', async () => {
  const order = await reservedOrder(10);
  const first = { paymentId: `pay-${order.orderId}`, amount: PRICE };
  const second = { paymentId: `pay2-${order.orderId}`, amount: PRICE };
  // No worker polls this queue yet, so all three signals are in the history before the workflow runs:
  // none of them can arrive after the workflow completed.
  const taskQueue = `${config.TEMPORAL_TASK_QUEUE}-signals`;
  const handle = await start(order, taskQueue);
  await handle.signal(paidSignal, first);
  await handle.signal(paidSignal, first);
  await handle.signal(paidSignal, second);

  const late = await workerOn(taskQueue);
  const view: Order = await late.runUntil(handle.result());
  expect(view).toMatchObject({ status: 'PAID', paymentId: first.paymentId });

  const after = await state(order);
  expect(after.row).toMatchObject({ status: 'PAID', paymentId: first.paymentId });
  expect(after).toMatchObject({ sold: 1, stock: 9, buyer: order.orderId });

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'PaymentRefundRequired') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1, PaymentRefundRequired: 1 });
  expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ paymentId: first.paymentId });
  expect(seen.find((e) => e.type === 'PaymentRefundRequired')).toMatchObject({
    eventId: `${order.orderId}:PaymentRefundRequired:${second.paymentId}`,
    paymentId: second.paymentId,
    amount: PRICE,
    reason: 'ORDER_NOT_PENDING',
  });
});

test('the unit Redis gave is held by another live order in PostgreSQL (Redis drifted): REJECTED SOLD_OUT, reservation ended, the unit kept out of stock', async () => {
  const order = await reservedOrder(1);
  // Another buyer's live order in PostgreSQL holds the item's one unit, which Redis still gave this order.
  const holder = { ...order, orderId: newOrderId(order.saleId), userId: `holder-${randomUUID()}` };
  expect(await clients.orders.place(holder)).toEqual({ status: 'PENDING' });
  const handle = await start(order);

  const view: Order = await handle.result();
  expect(view).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await orderStatusAttribute(handle)).toBe('REJECTED');

  const after = await state(order);
  expect(after.row).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(after.sold).toBe(1);
  // The unit stays with the order that holds it in PostgreSQL: not back in Redis stock.
  expect(after.stock).toBe(0);
  expect(after.reservation).toBeNull();
  expect(after.buyer).toBeNull();

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderRejected') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderRejected: 1 });
  expect(seen.find((e) => e.type === 'OrderRejected')).toMatchObject({ reason: 'SOLD_OUT' });
});
