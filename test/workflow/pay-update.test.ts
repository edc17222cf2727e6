/**
 * Update `pay` against the real dev server (127.0.0.1:7233, namespace flash-sale) with the production worker
 * (startWorker) on a task queue of its own, and the payment route of the real API.
 *
 * To keep a workflow open while several payments reach it, the test holds a PostgreSQL row lock that the
 * next activity needs (markPaid, or the expiry's sold − 1): the workflow has decided but cannot finish.
 * The steps are local activities, so while one waits the worker completes its workflow task only as a
 * heartbeat (at 80% of the 10 s task timeout): an update sent meanwhile is answered within about 8 s.
 *
 * What a completed workflow answers: executeUpdate on it rejects with WorkflowNotFoundError
 * ("workflow execution already completed"), as for an id that never existed; the payment route relies on
 * that to answer from PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type { PoolClient } from 'pg';
import type { RunningApi } from '../../src/api/main';
import type { OrderInput, OrderView, Payment } from '../../src/domain';
import { findOrder } from '../../src/orders';
import { saleKeys } from '../../src/reservations';
import { startOrderWorkflow } from '../../src/temporal';
import { OrderStatusKey, paidSignal, payUpdate } from '../../src/workflows/definitions';
import { createTestSale, testConfig, until, type Clients } from '../helpers';
import { countByType, uniqueEvents, type EventTap } from '../kafka';
import { useWorkflowHarness } from './harness';

const PRICE = 2500;
const SHORT_WINDOW_MS = 3000;
const LONG_WINDOW_MS = 120_000;

const config = testConfig();
const harness = useWorkflowHarness(config, { api: true });
let clients: Clients;
let temporal: Client;
let api: RunningApi;
let tap: EventTap;
beforeAll(() => ({ clients, temporal, tap, api } = harness));

async function startOrder(paymentWindowMs: number): Promise<{ order: OrderInput; handle: WorkflowHandle }> {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: PRICE, paymentWindowMs });
  const order: OrderInput = {
    orderId: randomUUID(),
    saleId: sale.saleId,
    itemId: sale.items[0].itemId,
    userId: `buyer-${randomUUID()}`,
    priceMinor: PRICE,
    paymentWindowMs,
    reservedAtMs: Date.now(),
  };
  expect(await clients.store.reserve(order.saleId, order.itemId, order.userId, order.orderId, order.reservedAtMs)).toEqual({
    kind: 'RESERVED',
    stockLeft: 4,
  });
  await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, order);
  return { order, handle: temporal.workflow.getHandle(order.orderId) };
}


/** Holds a row lock in an open transaction until release(). */
async function lockRow(sql: string, params: unknown[]): Promise<{ pid: number; release(): Promise<void> }> {
  const tx: PoolClient = await clients.pool.connect();
  await tx.query('BEGIN');
  await tx.query(sql, params);
  const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  return {
    pid,
    async release() {
      await tx.query('ROLLBACK');
      tx.release();
    },
  };
}

async function waitUntilBlockedBy(pid: number): Promise<void> {
  await until(`a statement blocked by backend ${pid}`, async () => {
    const res = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [pid]);
    return res.rows[0].n > 0;
  });
}

async function state(order: OrderInput) {
  const keys = saleKeys(order.saleId);
  const [row, item, stock, reservation] = await Promise.all([
    findOrder(clients.pool, order.orderId),
    clients.pool.query<{ sold: number }>('SELECT sold FROM items WHERE id = $1', [order.itemId]),
    clients.store.stock(order.saleId, [order.itemId]),
    clients.redis.hget(keys.reservations, order.orderId),
  ]);
  return { status: row?.status, paymentId: row?.paymentId, sold: item.rows[0].sold, stock: stock.get(order.itemId), reservation };
}

function payOverHttp(orderId: string, payment: Payment): Promise<{ status: number; body: Record<string, unknown> }> {
  return fetch(`${api.url}/api/flash-sales/orders/${orderId}/payment`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(payment),
  }).then(async (res) => ({ status: res.status, body: (await res.json()) as Record<string, unknown> }));
}

test('pay with the right amount: PAID in the workflow, PostgreSQL, search attributes and on Kafka', async () => {
  const { order, handle } = await startOrder(LONG_WINDOW_MS);
  const payment = { paymentId: `pay-${order.orderId}`, amount: PRICE };

  expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ status: 'PAID', paymentId: payment.paymentId });
  const view: OrderView = await handle.result();
  expect(view).toMatchObject({ status: 'PAID', paymentId: payment.paymentId });
  expect(await state(order)).toMatchObject({ status: 'PAID', paymentId: payment.paymentId, sold: 1, stock: 4 });
  expect((await state(order)).reservation).not.toBeNull();
  expect((await handle.describe()).typedSearchAttributes.get(OrderStatusKey)).toBe('PAID');

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ paymentId: payment.paymentId, amount: PRICE });
});

test('while the order is open: the same payment again is PAID again, another payment ORDER_NOT_PENDING', async () => {
  const { order, handle } = await startOrder(LONG_WINDOW_MS);
  const payment = { paymentId: `pay-${order.orderId}`, amount: PRICE };
  const other = { paymentId: `other-${order.orderId}`, amount: PRICE };
  await until('the order in PostgreSQL', () => findOrder(clients.pool, order.orderId));

  // markPaid cannot write the row while we hold it, so the workflow stays open after deciding.
  const lock = await lockRow('SELECT 1 FROM orders WHERE id = $1 FOR UPDATE', [order.orderId]);
  try {
    expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ status: 'PAID', paymentId: payment.paymentId });
    await waitUntilBlockedBy(lock.pid);
    const [again, second] = await Promise.all([
      handle.executeUpdate(payUpdate, { args: [payment] }),
      handle.executeUpdate(payUpdate, { args: [other] }),
    ]);
    expect(again).toEqual({ status: 'PAID', paymentId: payment.paymentId });
    expect(second).toEqual({ error: 'ORDER_NOT_PENDING' });
    expect((await handle.describe()).status.name).toBe('RUNNING');
  } finally {
    await lock.release();
  }

  expect(await handle.result()).toMatchObject({ status: 'PAID', paymentId: payment.paymentId });
  expect(await state(order)).toMatchObject({ status: 'PAID', paymentId: payment.paymentId, sold: 1, stock: 4 });
  // An update answers the payment service itself: no refund event for the refused one.
  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });

  // Once the workflow has completed, the payment route answers from PostgreSQL, with the same outcomes.
  expect(await payOverHttp(order.orderId, payment)).toEqual({
    status: 200,
    body: { orderId: order.orderId, status: 'PAID', paymentId: payment.paymentId },
  });
  expect(await payOverHttp(order.orderId, other)).toEqual({ status: 409, body: { error: 'ORDER_NOT_PENDING', orderId: order.orderId } });
}, 90_000);

test('a wrong amount is AMOUNT_MISMATCH and leaves the order open for the right payment', async () => {
  const { order, handle } = await startOrder(LONG_WINDOW_MS);
  const payment = { paymentId: `pay-${order.orderId}`, amount: PRICE };

  // Refused by the update's validator, so the refusal leaves no event in the workflow's history (I7).
  const refused = await handle.executeUpdate(payUpdate, { args: [{ ...payment, amount: PRICE - 1 }] }).catch((err: unknown) => err);
  expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
  expect((refused as WorkflowUpdateFailedError).cause).toMatchObject({ type: 'AMOUNT_MISMATCH' });
  const history = await handle.fetchHistory();
  expect(history.events?.some((e) => e.workflowExecutionUpdateAcceptedEventAttributes)).toBe(false);
  expect((await handle.describe()).status.name).toBe('RUNNING');
  expect(await state(order)).toMatchObject({ status: 'PENDING', paymentId: null, sold: 1 });

  expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ status: 'PAID', paymentId: payment.paymentId });
  expect(await handle.result()).toMatchObject({ status: 'PAID', paymentId: payment.paymentId });
  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ amount: PRICE });
});

test('during the expiry compensation: pay answers PAYMENT_WINDOW_CLOSED, a paid signal yields a refund event', async () => {
  const { order, handle } = await startOrder(SHORT_WINDOW_MS);
  const payment = { paymentId: `late-${order.orderId}`, amount: PRICE };
  const signalled = { paymentId: `late-signal-${order.orderId}`, amount: PRICE };
  await until('the order in PostgreSQL', () => findOrder(clients.pool, order.orderId));

  // expireOrder's sold − 1 waits for this lock: the window has closed, the workflow is still running.
  const lock = await lockRow('SELECT 1 FROM items WHERE id = $1 FOR UPDATE', [order.itemId]);
  try {
    await waitUntilBlockedBy(lock.pid);
    expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
    await handle.signal(paidSignal, signalled);
  } finally {
    await lock.release();
  }

  expect(await handle.result()).toMatchObject({ status: 'EXPIRED' });
  expect(await state(order)).toMatchObject({ status: 'EXPIRED', paymentId: null, sold: 0, stock: 5, reservation: null });
  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'PaymentRefundRequired') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderExpired: 1, PaymentRefundRequired: 1 });
  expect(seen.find((e) => e.type === 'PaymentRefundRequired')).toMatchObject({
    paymentId: signalled.paymentId,
    amount: PRICE,
    reason: 'PAYMENT_WINDOW_CLOSED',
  });
}, 90_000);

test('after expiry the workflow has completed: executeUpdate throws WorkflowNotFoundError, the route says 409', async () => {
  const { order, handle } = await startOrder(SHORT_WINDOW_MS);
  const payment = { paymentId: `late-${order.orderId}`, amount: PRICE };
  expect(await handle.result()).toMatchObject({ status: 'EXPIRED' });
  expect((await handle.describe()).typedSearchAttributes.get(OrderStatusKey)).toBe('EXPIRED');
  const before = await state(order);
  expect(before).toMatchObject({ status: 'EXPIRED', sold: 0, stock: 5, reservation: null });
  const eventsBefore = await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderExpired') });

  const updateError = await handle.executeUpdate(payUpdate, { args: [payment] }).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(updateError).toBeInstanceOf(WorkflowNotFoundError);
  expect((updateError as Error).message).toMatch(/already completed/);

  expect(await payOverHttp(order.orderId, payment)).toEqual({ status: 409, body: { error: 'PAYMENT_WINDOW_CLOSED', orderId: order.orderId } });
  // I7: the refusal changed nothing.
  expect(await state(order)).toEqual(before);
  expect(await tap.collect([order.orderId])).toEqual(eventsBefore);
});
