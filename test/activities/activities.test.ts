/**
 * The workflow's activities called directly (no Temporal) against the real PostgreSQL, Redis and Kafka (through the
 * outbox and its relay, as in a worker): each is run twice, as a retry or a replay would, and has one effect (I5):
 * one event per transition, however often it runs; and each follows PostgreSQL's word on the payment against the
 * deadline (I1, I4). The activities need no activity context: their business refusals are ApplicationFailure
 * values, which are plain errors.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { createActivities, type Activities } from '../../src/activities';
import { compensationFor, type OrderInput } from '../../src/order/types';
import { createKafka } from '../../src/infra/kafka';
import { createLogger } from '../../src/infra/logger';
import { OutboxRelay } from '../../src/order/outbox';
import { EventPublisher } from '../../src/order/publisher';
import type { Pool } from 'pg';
import { newOrderId } from '../../src/order/orderId';
import { Orders } from '../../src/order/store';
import { saleKeys } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { type Clients, connectClients, createTestSale, orderRow, testConfig, until } from '../support/helpers';
import { openEventTap, type EventTap } from '../support/kafka';

const config = testConfig();
/** A payment id of this run: the suites' database outlives a run, and a paymentId pays one order ever. */
const RUN = randomUUID().slice(0, 8);
const pid = (name: string) => `${name}-${RUN}`;
let clients: Clients;
let events: EventPublisher;
let relay: OutboxRelay;
let activities: Activities;
let tap: EventTap;

beforeAll(async () => {
  clients = connectClients(config);
  events = await EventPublisher.connect(createKafka(config, 'test-activities'), config.KAFKA_TOPIC);
  relay = new OutboxRelay(clients.pool, events, createLogger('silent', 'relay'));
  relay.start();
  activities = createActivities({ orders: clients.orders, reservations: clients.store });
  tap = await openEventTap(config);
});

afterAll(async () => {
  await relay?.stop();
  await Promise.allSettled([events?.disconnect(), tap?.close()]);
  await clients?.close();
});

/** An order reserved in Redis now, at the sale's terms, holding the unit Redis gave it. */
async function reserved(sale: Sale, itemIndex = 0, userId = `buyer-${randomUUID()}`): Promise<OrderInput> {
  const order = {
    orderId: newOrderId(sale.saleId),
    saleId: sale.saleId,
    itemId: sale.items[itemIndex].itemId,
    userId,
    priceMinor: sale.items[itemIndex].priceMinor,
    paymentWindowMs: sale.paymentWindowMs,
    reservedAtMs: Date.now(),
  };
  const outcome = await clients.store.reserve(order);
  if (outcome.kind !== 'RESERVED') throw new Error(`not reserved: ${outcome.kind}`);
  return { ...order, unit: outcome.unit, stockShard: outcome.stockShard, stockEpoch: outcome.stockEpoch };
}

/** The order as if reserved a whole payment window and a second ago: its deadline has passed. */
const lapsed = (order: OrderInput): OrderInput => ({ ...order, reservedAtMs: order.reservedAtMs - order.paymentWindowMs - 1000 });

/** The item's units sold in PostgreSQL: its live (PENDING and PAID) orders, each holding one unit. */
async function sold(itemId: number): Promise<number> {
  return (await clients.pool.query<{ sold: number }>(`SELECT count(*)::int AS sold FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`, [itemId])).rows[0].sold;
}

async function stock(order: OrderInput): Promise<number | undefined> {
  return (await clients.store.view.stock(order.saleId, [order.itemId])).get(order.itemId);
}

async function ordersOfSale(saleId: number): Promise<{ status: string; reason: string | null }[]> {
  return (await clients.pool.query('SELECT status, reason FROM orders WHERE sale_id = $1', [saleId])).rows;
}

async function eventTypes(order: OrderInput): Promise<string[]> {
  return (await tap.collect([order.orderId])).map((e) => e.type);
}

test('placeOrder twice: one PENDING row, sold counted once, one OrderPlaced', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = await reserved(sale);
  expect(await activities.placeOrder(order)).toEqual({ status: 'PENDING' });
  expect(await activities.placeOrder(order)).toEqual({ status: 'PENDING' });
  expect(await ordersOfSale(sale.saleId)).toEqual([{ status: 'PENDING', reason: null }]);
  expect(await sold(order.itemId)).toBe(1);
  const placed = await tap.collect([order.orderId]);
  expect(placed.map((e) => e.eventId)).toEqual([`${order.orderId}:OrderPlaced`]);
});

test('placeOrder when PostgreSQL holds its unit for another live order (Redis drifted): REJECTED SOLD_OUT, not counted; settled, OrderRejected; its compensation ends the reservation once and keeps the unit out of stock (the other order holds it)', async () => {
  const sale = await createTestSale(clients, { quantities: [2] });
  const order = await reserved(sale);
  // Another buyer's live order in PostgreSQL holds the very unit Redis just gave this order.
  const holder = { ...order, orderId: newOrderId(sale.saleId), userId: `holder-${randomUUID()}` };
  expect(await clients.orders.place(holder)).toEqual({ status: 'PENDING' });

  expect(await activities.placeOrder(order)).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await activities.placeOrder(order)).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await sold(order.itemId)).toBe(1);
  expect(await stock(order)).toBe(1);

  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  const settled = await activities.settleOrder(order, Date.now());
  expect(settled).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  const keys = saleKeys(sale.saleId);
  expect(await clients.redis.hget(keys.reservations, order.orderId)).not.toBeNull();
  const compensation = compensationFor(settled);
  expect(compensation).toEqual({ unitBack: false });
  await activities.releaseUnit(order, false);
  await activities.releaseUnit(order, false);
  expect(await clients.redis.lrange(keys.stock(order.itemId), 0, -1)).toEqual(['2']);
  expect(await clients.redis.hget(keys.reservations, order.orderId)).toBeNull();
  expect(await clients.redis.hget(keys.buyers, order.userId)).toBeNull();
  expect(await eventTypes(order)).toEqual(['OrderPlaced', 'OrderRejected']);
});

test('placeOrder for a second order of the same buyer in the sale (other item): REJECTED ALREADY_PURCHASED; once the first expired, the buyer may buy again', async () => {
  const sale = await createTestSale(clients, { quantities: [5, 5] });
  const first = await reserved(sale, 0);
  const second = { ...first, orderId: newOrderId(first.saleId), itemId: sale.items[1].itemId };

  expect(await activities.placeOrder(lapsed(first))).toEqual({ status: 'PENDING' });
  expect(await activities.placeOrder(second)).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await activities.placeOrder(second)).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await sold(first.itemId)).toBe(1);
  expect(await sold(second.itemId)).toBe(0);

  // I3: once the first order has expired, the buyer may buy again.
  expect(await activities.settleOrder(first, Date.now())).toEqual({ status: 'EXPIRED' });
  const third = { ...first, orderId: newOrderId(first.saleId), itemId: sale.items[1].itemId };
  expect(await activities.placeOrder(third)).toEqual({ status: 'PENDING' });
  expect(await sold(third.itemId)).toBe(1);
});

test('placeOrder of a buyer whose live order holds the very unit Redis handed out again (a failover lost that order\'s reservation and entry): REJECTED SOLD_OUT whichever index fires first, and the unit stays out of stock', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const first = await reserved(sale);
  expect(await activities.placeOrder(first)).toEqual({ status: 'PENDING' });
  // What a promoted replica that missed the reserve holds: no reservation, no buyer's entry, the unit free (first).
  const keys = saleKeys(sale.saleId);
  await clients.redis.multi().hdel(keys.reservations, first.orderId).hdel(keys.buyers, first.userId).lpush(keys.stock(first.itemId), String(first.unit)).exec();
  const again = await reserved(sale, 0, first.userId);
  expect(again.unit).toBe(first.unit);

  // Both unique indexes stand in its way; today's refusal named the buyer's (ALREADY_PURCHASED) and gave the unit back.
  expect(await activities.placeOrder(again)).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(compensationFor({ status: 'REJECTED', reason: 'SOLD_OUT' })).toEqual({ unitBack: false });
  await activities.releaseUnit(again, false);
  expect(await clients.redis.lrange(keys.stock(first.itemId), 0, -1)).toEqual(['2', '3']);
  expect(await orderRow(clients.pool, first.orderId)).toMatchObject({ status: 'PENDING' });
});

test('placeOrder that PostgreSQL refuses (negative price) fails non-retryably as CONSTRAINT_VIOLATION; rejectUnstored, then its compensation returns the unit once', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = { ...(await reserved(sale)), priceMinor: -1 };

  const failure = await activities.placeOrder(order).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(failure).toBeInstanceOf(ApplicationFailure);
  expect(failure).toMatchObject({ type: 'CONSTRAINT_VIOLATION', nonRetryable: true });
  expect(await ordersOfSale(sale.saleId)).toEqual([]);
  expect(await sold(order.itemId)).toBe(0);

  expect(await activities.rejectUnstored(order, 'CONSTRAINT_VIOLATION')).toEqual({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(await activities.rejectUnstored(order, 'CONSTRAINT_VIOLATION')).toEqual({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(await stock(order)).toBe(4);
  expect(compensationFor({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' })).toEqual({ unitBack: true });
  await activities.releaseUnit(order, true);
  await activities.releaseUnit(order, true);
  expect(await stock(order)).toBe(5);
  // Queued twice (no row to hold it once): one eventId on the topic, once or twice.
  expect([...new Set(await eventTypes(order))]).toEqual(['OrderRejected']);
});

test('settleOrder before the deadline changes nothing; after it, twice: EXPIRED, sold − 1 once, OrderExpired; its compensation, twice: the unit back once', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const early = await reserved(sale);
  await activities.placeOrder(early);
  expect(await activities.settleOrder(early, Date.now())).toEqual({ status: 'PENDING' });
  expect((await orderRow(clients.pool, early.orderId))?.status).toBe('PENDING');
  expect(await stock(early)).toBe(4);

  const late = await reserved(sale);
  await activities.placeOrder(lapsed(late));
  expect(await sold(late.itemId)).toBe(2);
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect((await orderRow(clients.pool, late.orderId))?.status).toBe('EXPIRED');
  expect(await sold(late.itemId)).toBe(1);
  expect(await stock(late)).toBe(3);
  expect(compensationFor({ status: 'EXPIRED' })).toEqual({ unitBack: true });
  await activities.releaseUnit(late, true);
  await activities.releaseUnit(late, true);
  expect(await stock(late)).toBe(4);
  expect(await eventTypes(late)).toEqual(['OrderPlaced', 'OrderExpired']);
});

test('payOrder: PAID twice for the same payment (OrderPaid), ORDER_NOT_PENDING for another, AMOUNT_MISMATCH changes nothing, also under the paid paymentId; settling a paid order keeps its unit', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await activities.placeOrder(order);

  expect(await activities.payOrder(order, { paymentId: pid('wrong'), amount: 699 })).toEqual({ error: 'AMOUNT_MISMATCH' });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'PENDING', paymentId: null });
  expect(await activities.payOrder(order, { paymentId: pid('pay-1'), amount: 700 })).toEqual({ status: 'PAID', paymentId: pid('pay-1') });
  expect(await activities.payOrder(order, { paymentId: pid('pay-1'), amount: 700 })).toEqual({ status: 'PAID', paymentId: pid('pay-1') });
  expect(await activities.payOrder(order, { paymentId: pid('pay-1'), amount: 701 })).toEqual({ error: 'AMOUNT_MISMATCH' });
  expect(await activities.payOrder(order, { paymentId: pid('pay-2'), amount: 700 })).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: pid('pay-1') });

  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'PAID', paymentId: pid('pay-1') });
  expect(await sold(order.itemId)).toBe(1);
  expect(await stock(order)).toBe(4);
  const seen = await tap.collect([order.orderId]);
  expect(seen.map((e) => e.type)).toEqual(['OrderPlaced', 'OrderPaid']);
  expect(seen.filter((e) => e.type === 'OrderPaid').every((e) => e.paymentId === pid('pay-1') && e.amount === 700)).toBe(true);
});

test('payOrder racing the order’s insert (committed while its statement waits on the row) pays, not ORDER_NOT_PENDING', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  // The workflow storing the order at that moment: its insert is in PostgreSQL, not committed yet, when the
  // payment's statement runs; that statement's snapshot has no row, and its INSERT waits on the workflow's.
  const workflow = await clients.pool.connect();
  try {
    await workflow.query('BEGIN');
    await new Orders(workflow as unknown as Pool, clients.store.view).place(order);
    const paying = new Orders(clients.pool, clients.store.view).pay(order.orderId, { paymentId: pid('racing'), amount: 700 }, order);
    await until('the payment waiting on the uncommitted row', async () => {
      const res = await clients.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH current AS%'",
      );
      return res.rows[0].n === 1;
    });
    await workflow.query('COMMIT');
    expect(await paying).toEqual({ status: 'PAID', paymentId: pid('racing') });
  } finally {
    workflow.release();
  }
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: pid('racing') });
});

test('payOrder after the deadline: PAYMENT_WINDOW_CLOSED while still PENDING and once EXPIRED; the expiry wins and the unit comes back', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await activities.placeOrder(lapsed(order));

  expect(await activities.payOrder(order, { paymentId: pid('late'), amount: 700 })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect((await orderRow(clients.pool, order.orderId))?.status).toBe('PENDING');
  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.payOrder(order, { paymentId: pid('later'), amount: 700 })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'EXPIRED', paymentId: null });
  await activities.releaseUnit(order, true);
  expect(await stock(order)).toBe(5);
});

test('settleOrder on an order without a row fails non-retryably as ORDER_NOT_FOUND', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = { ...(await reserved(sale)), orderId: newOrderId(sale.saleId) };
  await expect(activities.settleOrder(order, Date.now())).rejects.toMatchObject({ type: 'ORDER_NOT_FOUND', nonRetryable: true });
});

test('a workflow first run after its deadline places then settles at once: EXPIRED, sold back to where it was, the unit back once however often it runs; before the deadline, only placed', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const late = lapsed(await reserved(sale));
  expect(await activities.placeOrder(late)).toEqual({ status: 'PENDING' });
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect((await orderRow(clients.pool, late.orderId))?.status).toBe('EXPIRED');
  expect(await sold(late.itemId)).toBe(0);
  await activities.releaseUnit(late, true);
  await activities.releaseUnit(late, true);
  expect(await stock(late)).toBe(5);
  expect(await eventTypes(late)).toEqual(['OrderPlaced', 'OrderExpired']);

  const early = await reserved(sale);
  expect(await activities.placeOrder(early)).toEqual({ status: 'PENDING' });
  expect(await activities.settleOrder(early, Date.now())).toEqual({ status: 'PENDING' });
  expect((await orderRow(clients.pool, early.orderId))?.status).toBe('PENDING');
  expect(await sold(early.itemId)).toBe(1);
  expect(await stock(early)).toBe(4);
  expect(await eventTypes(early)).toEqual(['OrderPlaced']);
});

test('an order the payment route stored and paid before its workflow ran: placed PAID, settled PAID, its unit kept, OrderPlaced then OrderPaid', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await clients.orders.place(order);
  expect(await clients.orders.pay(order.orderId, { paymentId: pid('by-route'), amount: 700 })).toEqual({ status: 'PAID', paymentId: pid('by-route') });
  expect(await activities.placeOrder(order)).toEqual({ status: 'PAID', paymentId: pid('by-route') });
  expect(await activities.settleOrder(order, Date.now() + 700_000)).toEqual({ status: 'PAID', paymentId: pid('by-route') });
  expect(await sold(order.itemId)).toBe(1);
  expect(await stock(order)).toBe(4);
  expect(await eventTypes(order)).toEqual(['OrderPlaced', 'OrderPaid']);
});

test('Orders.pay for an order its workflow has not stored (the payment route): stored PAID and counted once; past the deadline nothing written; for a buyer with another live order or an exhausted item, refused and stored REJECTED as its workflow would', async () => {
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: 700 });
  const order = await reserved(sale);
  expect(await clients.orders.pay(order.orderId, { paymentId: pid('route-1'), amount: 700 })).toEqual({ status: 'PAID', paymentId: pid('route-1'), stored: true });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: pid('route-1'), priceMinor: 700 });
  expect(await sold(order.itemId)).toBe(1);
  // Again: answered PAID, nothing changes; another payment: refused, nothing changes.
  expect(await clients.orders.pay(order.orderId, { paymentId: pid('route-1'), amount: 700 })).toEqual({ status: 'PAID', paymentId: pid('route-1') });
  expect(await clients.orders.pay(order.orderId, { paymentId: pid('route-2'), amount: 700 })).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: pid('route-1') });
  expect(await sold(order.itemId)).toBe(1);
  // The workflow's placeOrder then finds the row PAID, and settling keeps the unit.
  expect(await activities.placeOrder(order)).toEqual({ status: 'PAID', paymentId: pid('route-1') });
  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'PAID', paymentId: pid('route-1') });
  expect(await sold(order.itemId)).toBe(1);

  // Past the deadline by PostgreSQL's clock: refused, no row.
  const late = lapsed(await reserved(sale));
  expect(await clients.orders.pay(late.orderId, { paymentId: pid('route-late'), amount: 700 }, late)).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect(await orderRow(clients.pool, late.orderId)).toBeUndefined();

  // The same buyer holds a live order in the sale (I3): refused; the order is stored REJECTED. (Its unit, 2, is
  // held by no live order in PostgreSQL: only the buyer's other order stands in the way.)
  const second = { ...order, orderId: newOrderId(order.saleId), reservedAtMs: Date.now(), unit: 2 };
  expect(await clients.orders.pay(second.orderId, { paymentId: pid('route-second'), amount: 700 }, second)).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, second.orderId)).toMatchObject({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });

  // The last unit (2: the lapsed order's, which PostgreSQL never stored) goes to one order; PostgreSQL has none
  // left for another (I1): refused, stored REJECTED (without a unit), sold unchanged; so is a unit the item lacks.
  const last = { ...order, orderId: newOrderId(order.saleId), userId: `buyer-${randomUUID()}`, reservedAtMs: Date.now(), unit: 2 };
  expect(await clients.orders.pay(last.orderId, { paymentId: pid('route-last'), amount: 700 }, last)).toEqual({ status: 'PAID', paymentId: pid('route-last'), stored: true });
  const over = { ...last, orderId: newOrderId(last.saleId), userId: `buyer-${randomUUID()}` };
  expect(await clients.orders.pay(over.orderId, { paymentId: pid('route-over'), amount: 700 }, over)).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, over.orderId)).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  const beyond = { ...last, orderId: newOrderId(last.saleId), userId: `buyer-${randomUUID()}`, unit: 3 };
  expect(await clients.orders.pay(beyond.orderId, { paymentId: pid('route-beyond'), amount: 700 }, beyond)).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, beyond.orderId)).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect((await clients.pool.query('SELECT unit FROM orders WHERE id = ANY($1)', [[over.orderId, beyond.orderId]])).rows).toEqual([{ unit: null }, { unit: null }]);
  expect(await sold(order.itemId)).toBe(2);
});

test('Orders.pay: a paymentId pays one order; on another, with its row or without, PAYMENT_ID_USED and nothing changes; on its own order it is answered PAID again', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const [a, b, c] = [await reserved(sale), await reserved(sale), await reserved(sale)];
  await clients.orders.place(a);
  await clients.orders.place(b);
  const shared = { paymentId: `shared-${a.orderId}`, amount: 700 };
  expect(await clients.orders.pay(a.orderId, shared)).toEqual({ status: 'PAID', paymentId: shared.paymentId });
  expect(await clients.orders.pay(b.orderId, shared)).toEqual({ error: 'PAYMENT_ID_USED' });
  expect(await orderRow(clients.pool, b.orderId)).toMatchObject({ status: 'PENDING', paymentId: null });
  // c has no row yet: the route's path, which would store it PAID from its reservation, stores nothing.
  expect(await clients.orders.pay(c.orderId, shared)).toEqual({ error: 'PAYMENT_ID_USED' });
  expect(await orderRow(clients.pool, c.orderId)).toBeUndefined();
  expect(await sold(a.itemId)).toBe(2);
  expect(await clients.orders.pay(a.orderId, shared)).toEqual({ status: 'PAID', paymentId: shared.paymentId });
  // b paid by its own payment, then sent the shared one (a signal queued behind the update): still not b's money.
  expect(await clients.orders.pay(b.orderId, { paymentId: `own-${b.orderId}`, amount: 700 })).toMatchObject({ status: 'PAID' });
  expect(await clients.orders.pay(b.orderId, shared)).toEqual({ error: 'PAYMENT_ID_USED' });
  expect(await clients.orders.pay(b.orderId, { ...shared, amount: 1 })).toEqual({ error: 'PAYMENT_ID_USED' });
  expect((await clients.pool.query('SELECT order_id AS "orderId" FROM payments WHERE payment_id = $1', [shared.paymentId])).rows).toEqual([{ orderId: a.orderId }]);
});
