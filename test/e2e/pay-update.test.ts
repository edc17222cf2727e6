/**
 * Update `pay` against the real dev server (127.0.0.1:7233, namespace flash-sale) with the production worker
 * (startWorker) on a task queue of its own, and the payment route of the real API.
 *
 * PostgreSQL decides every payment against the deadline (src/order/store.ts payOrder), so payments racing through
 * the update and the route agree. To keep a workflow open while a late payment reaches it, a test holds the
 * order's row lock, which the expiry's UPDATE needs (a late payment's UPDATE does not: its condition, the window
 * open, fails before it would lock the row). The steps are local activities, so while one waits the worker
 * completes its workflow task only as a heartbeat (at 80% of the 10 s task timeout): an update sent
 * meanwhile is answered within about 8 s.
 *
 * What a completed workflow answers: executeUpdate on it rejects with WorkflowNotFoundError
 * ("workflow execution already completed"), as for an id that never existed; the payment route relies on
 * that to answer from PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client, type WorkflowHandle } from '@temporalio/client';
import type { PoolClient } from 'pg';
import type { RunningApi } from '../../src/api/main';
import type { OrderInput, Order, Payment } from '../../src/order/types';
import { saleKeys } from '../../src/reservation/layout';
import { startOrderWorkflow } from '../../src/workflows/client';
import { OrderStatusKey, paidSignal, payUpdate } from '../../src/workflows/definitions';
import { type Clients, createTestSale, orderRow, testConfig, until } from '../support/helpers';
import { countByType, uniqueEvents, type EventTap } from '../support/kafka';
import { useWorkflowHarness } from '../support/workflowHarness';
import { newOrderId } from '../../src/order/orderId';

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
    orderId: newOrderId(sale.saleId),
    saleId: sale.saleId,
    itemId: sale.items[0].itemId,
    userId: `buyer-${randomUUID()}`,
    priceMinor: PRICE,
    paymentWindowMs,
    reservedAtMs: Date.now(),
  };
  expect(await clients.store.reserve(order)).toEqual({
    kind: 'RESERVED',
    stockLeft: 4,
    stockShard: 0,
    unit: 1,
    stockEpoch: 1,
  });
  const held: OrderInput = { ...order, unit: 1, stockShard: 0, stockEpoch: 1 };
  await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, held);
  return { order: held, handle: temporal.workflow.getHandle(order.orderId) };
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

/** Waits until `statements` statements wait on locks, the first of them on the one `pid` holds (the rest queue behind it). */
async function waitUntilBlockedBy(pid: number, statements = 1): Promise<void> {
  await until(`${statements} statement(s) waiting behind backend ${pid}`, async () => {
    const res = await clients.pool.query<{ direct: number; waiting: number }>(
      `SELECT count(*) FILTER (WHERE $1 = ANY(pg_blocking_pids(pid)))::int AS direct,
              count(*) FILTER (WHERE cardinality(pg_blocking_pids(pid)) > 0)::int AS waiting
       FROM pg_stat_activity WHERE datname = current_database()`,
      [pid],
    );
    return res.rows[0].direct > 0 && res.rows[0].waiting >= statements;
  });
}

async function state(order: OrderInput) {
  const keys = saleKeys(order.saleId);
  const [row, item, stock, reservation] = await Promise.all([
    orderRow(clients.pool, order.orderId),
    // Units sold: the item's live orders, a unit each.
    clients.pool.query<{ sold: number }>(`SELECT count(*)::int AS sold FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`, [order.itemId]),
    clients.store.view.stock(order.saleId, [order.itemId]),
    clients.redis.hget(keys.reservations, order.orderId),
  ]);
  return { status: row?.status, paymentId: row?.paymentId, sold: item.rows[0].sold, stock: stock.get(order.itemId), reservation };
}

function payOverHttp(orderId: string, payment: Payment): Promise<{ status: number; body: Record<string, unknown> }> {
  return fetch(`${api.internalUrl}/api/flash-sales/orders/${orderId}/payment`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(payment),
  }).then(async (res) => ({ status: res.status, body: (await res.json()) as Record<string, unknown> }));
}

test('pay with the right amount: PAID in the workflow, PostgreSQL, search attributes and on Kafka', async () => {
  const { order, handle } = await startOrder(LONG_WINDOW_MS);
  const payment = { paymentId: `pay-${order.orderId}`, amount: PRICE };

  expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ status: 'PAID', paymentId: payment.paymentId });
  const view: Order = await handle.result();
  expect(view).toMatchObject({ status: 'PAID', paymentId: payment.paymentId });
  expect(await state(order)).toMatchObject({ status: 'PAID', paymentId: payment.paymentId, sold: 1, stock: 4 });
  expect((await state(order)).reservation).not.toBeNull();
  expect((await handle.describe()).typedSearchAttributes.get(OrderStatusKey)).toBe('PAID');

  const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
  expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ paymentId: payment.paymentId, amount: PRICE });
});

describe('payments racing on one order (two payment ids, each sent twice, waiting on the row until it is released): one payment id wins', () => {
  const answerOf = (r: { status: number; body: Record<string, unknown> }) => (r.status === 200 ? { status: 'PAID', paymentId: r.body.paymentId } : { error: r.body.error });

  // The route's four statements all wait on the row; the run decides its updates one at a time, in the order it
  // received them (docs/design.md), so one of them waits there and the other three wait in the run.
  test.each([
    // An update the run had not yet taken when it completed is aborted (WorkflowNotFoundError): the payment
    // client then answers from the order (endedAnswer), as the route does.
    [
      'the update',
      (handle: WorkflowHandle, orderId: string, p: Payment) =>
        handle.executeUpdate(payUpdate, { args: [p] }).catch((err: unknown) => (err instanceof WorkflowNotFoundError ? payOverHttp(orderId, p).then(answerOf) : Promise.reject(err))),
      1,
    ],
    ['the payment route', (_handle: WorkflowHandle, orderId: string, p: Payment) => payOverHttp(orderId, p).then(answerOf), 4],
  ])('through %s', async (_name, pay, onTheRow) => {
    const { order, handle } = await startOrder(LONG_WINDOW_MS);
    const a = { paymentId: `a-${order.orderId}`, amount: PRICE };
    const b = { paymentId: `b-${order.orderId}`, amount: PRICE };
    await until('the order in PostgreSQL', () => orderRow(clients.pool, order.orderId));

    // None is decided (nor can the workflow finish) before they wait on the row.
    const lock = await lockRow('SELECT 1 FROM orders WHERE id = $1 FOR UPDATE', [order.orderId]);
    const racing = Promise.all([a, b, b, a].map((p) => pay(handle, order.orderId, p)));
    try {
      await waitUntilBlockedBy(lock.pid, onTheRow);
    } finally {
      await lock.release();
    }
    const answers = await racing;
    const winner = (await orderRow(clients.pool, order.orderId))?.paymentId;
    expect([a.paymentId, b.paymentId]).toContain(winner);
    const expected = (p: Payment) => (p.paymentId === winner ? { status: 'PAID', paymentId: winner } : { error: 'ORDER_NOT_PENDING' });
    expect(answers).toEqual([a, b, b, a].map(expected));

    expect(await handle.result()).toMatchObject({ status: 'PAID', paymentId: winner });
    expect(await state(order)).toMatchObject({ status: 'PAID', paymentId: winner, sold: 1, stock: 4 });
    // The update and the route answer the payment service themselves: no refund event for the refused ones.
    const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
    expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
    expect(seen.find((e) => e.type === 'OrderPaid')).toMatchObject({ paymentId: winner, amount: PRICE });

    // Once the workflow has completed, the route answers the same from PostgreSQL.
    expect(await Promise.all([a, b].map((p) => payOverHttp(order.orderId, p).then(answerOf)))).toEqual([a, b].map(expected));
  }, 90_000);
});

test('a paymentId that paid one order is refused on another through the route, the update and the signal (PAYMENT_ID_USED): nothing changes, and no refund is asked for money the first order holds', async () => {
  const first = await startOrder(LONG_WINDOW_MS);
  const shared = { paymentId: `shared-${first.order.orderId}`, amount: PRICE };
  expect(await first.handle.executeUpdate(payUpdate, { args: [shared] })).toEqual({ status: 'PAID', paymentId: shared.paymentId });
  for (const via of ['route', 'update', 'signal'] as const) {
    const { order, handle } = await startOrder(LONG_WINDOW_MS);
    await until('the order in PostgreSQL', () => orderRow(clients.pool, order.orderId));
    const before = await state(order);
    expect(before).toMatchObject({ status: 'PENDING', paymentId: null });
    if (via === 'route') expect(await payOverHttp(order.orderId, shared)).toEqual({ status: 409, body: { error: 'PAYMENT_ID_USED', orderId: order.orderId } });
    if (via === 'update') expect(await handle.executeUpdate(payUpdate, { args: [shared] })).toEqual({ error: 'PAYMENT_ID_USED' });
    if (via === 'signal') await handle.signal(paidSignal, shared);
    if (via !== 'signal') expect(await state(order)).toEqual(before);
    // The order's own payment, after the refused one (handled in the order they arrived), still pays it.
    const own = { paymentId: `own-${order.orderId}`, amount: PRICE };
    expect(await handle.executeUpdate(payUpdate, { args: [own] })).toEqual({ status: 'PAID', paymentId: own.paymentId });
    expect(await handle.result()).toMatchObject({ status: 'PAID', paymentId: own.paymentId });
    const seen = uniqueEvents(await tap.collect([order.orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') }));
    expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
  }
  expect(await state(first.order)).toMatchObject({ status: 'PAID', paymentId: shared.paymentId });
}, 120_000);

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
  await until('the order in PostgreSQL', () => orderRow(clients.pool, order.orderId));

  // The expiry's UPDATE of the order waits for this lock: the window has closed, the workflow is still running.
  const lock = await lockRow('SELECT 1 FROM orders WHERE id = $1 FOR UPDATE', [order.orderId]);
  try {
    await waitUntilBlockedBy(lock.pid);
    expect(await handle.executeUpdate(payUpdate, { args: [payment] })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
    await handle.signal(paidSignal, signalled);
    expect((await handle.describe()).status.name).toBe('RUNNING');
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
