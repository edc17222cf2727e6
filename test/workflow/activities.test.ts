/**
 * The workflow's activities called directly (no Temporal) against the real PostgreSQL, Redis and Kafka: each is
 * run twice, as a retry or a replay would, and has one effect (I5), and each follows PostgreSQL's word on the
 * payment against the deadline (I1, I4). The activities need no activity context: their business refusals are
 * ApplicationFailure values, which are plain errors.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { createActivities, type Activities } from '../../src/activities';
import type { OrderInput } from '../../src/order/types';
import { createKafka } from '../../src/kafka';
import { EventPublisher } from '../../src/order/publisher';
import type { Pool } from 'pg';
import { findOrder, payOrder, persistOrder, storePaidOrder } from '../../src/order/store';
import { saleKeys } from '../../src/reservation/store';
import type { Sale } from '../../src/sale/sales';
import { connectClients, createTestSale, testConfig, type Clients } from '../helpers';
import { openEventTap, type EventTap } from '../kafka';

const config = testConfig();
let clients: Clients;
let events: EventPublisher;
let activities: Activities;
let tap: EventTap;

beforeAll(async () => {
  clients = connectClients(config);
  events = await EventPublisher.connect(createKafka(config, 'test-activities'), config.KAFKA_TOPIC, config.KAFKA_IDEMPOTENT);
  activities = createActivities({ pool: clients.pool, store: clients.store, events });
  tap = await openEventTap(config);
});

afterAll(async () => {
  await Promise.allSettled([events?.disconnect(), tap?.close()]);
  await clients?.close();
});

/** An order reserved in Redis now, at the sale's terms. */
async function reserved(sale: Sale, itemIndex = 0, userId = `buyer-${randomUUID()}`): Promise<OrderInput> {
  const order = {
    orderId: randomUUID(),
    saleId: sale.saleId,
    itemId: sale.items[itemIndex].itemId,
    userId,
    priceMinor: sale.items[itemIndex].priceMinor,
    paymentWindowMs: sale.paymentWindowMs,
    reservedAtMs: Date.now(),
  };
  expect((await clients.store.reserve(order)).kind).toBe('RESERVED');
  return order;
}

const ahead = () => new Date(Date.now() + 600_000).toISOString();
const passed = () => new Date(Date.now() - 1000).toISOString();

async function sold(itemId: number): Promise<number> {
  return (await clients.pool.query<{ sold: number }>('SELECT sold FROM items WHERE id = $1', [itemId])).rows[0].sold;
}

async function stock(order: OrderInput): Promise<number | undefined> {
  return (await clients.store.stock(order.saleId, [order.itemId])).get(order.itemId);
}

async function ordersOfSale(saleId: number): Promise<{ status: string; reason: string | null }[]> {
  return (await clients.pool.query('SELECT status, reason FROM orders WHERE sale_id = $1', [saleId])).rows;
}

async function eventTypes(order: OrderInput): Promise<string[]> {
  return (await tap.collect([order.orderId])).map((e) => e.type);
}

test('placeOrder twice: one PENDING row, sold counted once, OrderPlaced under one eventId', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = await reserved(sale);
  const at = ahead();

  expect(await activities.placeOrder(order, at)).toEqual({ status: 'PENDING' });
  expect(await activities.placeOrder(order, at)).toEqual({ status: 'PENDING' });
  expect(await ordersOfSale(sale.saleId)).toEqual([{ status: 'PENDING', reason: null }]);
  expect(await sold(order.itemId)).toBe(1);
  const placed = await tap.collect([order.orderId]);
  expect(placed.map((e) => e.type)).toEqual(['OrderPlaced', 'OrderPlaced']);
  expect(new Set(placed.map((e) => e.eventId))).toEqual(new Set([`${order.orderId}:OrderPlaced`]));
});

test('placeOrder when PostgreSQL has no unit left: REJECTED SOLD_OUT, not counted; settling it returns the unit once with OrderRejected', async () => {
  const sale = await createTestSale(clients, { quantities: [2] });
  await clients.pool.query('UPDATE items SET sold = quantity WHERE id = $1', [sale.items[0].itemId]);
  const order = await reserved(sale);

  expect(await activities.placeOrder(order, ahead())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await activities.placeOrder(order, ahead())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await ordersOfSale(sale.saleId)).toEqual([{ status: 'REJECTED', reason: 'SOLD_OUT' }]);
  expect(await sold(order.itemId)).toBe(2);
  expect(await stock(order)).toBe(1);

  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await stock(order)).toBe(2);
  expect(await clients.redis.hget(saleKeys(sale.saleId).reservations, order.orderId)).toBeNull();
  expect(await eventTypes(order)).toEqual(['OrderPlaced', 'OrderPlaced', 'OrderRejected', 'OrderRejected']);
});

test('placeOrder for a second order of the same buyer in the sale (other item): REJECTED ALREADY_PURCHASED; once the first expired, the buyer may buy again', async () => {
  const sale = await createTestSale(clients, { quantities: [5, 5] });
  const first = await reserved(sale, 0);
  const second = { ...first, orderId: randomUUID(), itemId: sale.items[1].itemId };

  expect(await activities.placeOrder(first, passed())).toEqual({ status: 'PENDING' });
  expect(await activities.placeOrder(second, ahead())).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await activities.placeOrder(second, ahead())).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await sold(first.itemId)).toBe(1);
  expect(await sold(second.itemId)).toBe(0);

  // I3: once the first order has expired, the buyer may buy again.
  expect(await activities.settleOrder(first, Date.now())).toEqual({ status: 'EXPIRED' });
  const third = { ...first, orderId: randomUUID(), itemId: sale.items[1].itemId };
  expect(await activities.placeOrder(third, ahead())).toEqual({ status: 'PENDING' });
  expect(await sold(third.itemId)).toBe(1);
});

test('placeOrder that PostgreSQL refuses (negative price) fails non-retryably as CONSTRAINT_VIOLATION; rejectUnstored returns the unit once', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = { ...(await reserved(sale)), priceMinor: -1 };

  const failure = await activities.placeOrder(order, ahead()).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(failure).toBeInstanceOf(ApplicationFailure);
  expect(failure).toMatchObject({ type: 'CONSTRAINT_VIOLATION', nonRetryable: true });
  expect(await ordersOfSale(sale.saleId)).toEqual([]);
  expect(await sold(order.itemId)).toBe(0);

  expect(await activities.rejectUnstored(order, 'CONSTRAINT_VIOLATION')).toEqual({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(await activities.rejectUnstored(order, 'CONSTRAINT_VIOLATION')).toEqual({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(await stock(order)).toBe(5);
  expect(await eventTypes(order)).toEqual(['OrderRejected', 'OrderRejected']);
});

test('settleOrder before the deadline changes nothing; after it, twice: EXPIRED, sold − 1 once, the unit back once, OrderExpired', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const early = await reserved(sale);
  await activities.placeOrder(early, ahead());
  expect(await activities.settleOrder(early, Date.now())).toEqual({ status: 'PENDING' });
  expect((await findOrder(clients.pool, early.orderId))?.status).toBe('PENDING');
  expect(await stock(early)).toBe(4);

  const late = await reserved(sale);
  await activities.placeOrder(late, passed());
  expect(await sold(late.itemId)).toBe(2);
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.settleOrder(late, Date.now())).toEqual({ status: 'EXPIRED' });
  expect((await findOrder(clients.pool, late.orderId))?.status).toBe('EXPIRED');
  expect(await sold(late.itemId)).toBe(1);
  expect(await stock(late)).toBe(4);
  expect(await eventTypes(late)).toEqual(['OrderPlaced', 'OrderExpired', 'OrderExpired']);
});

test('payOrder: PAID twice for the same payment (OrderPaid), ORDER_NOT_PENDING for another, AMOUNT_MISMATCH changes nothing, also under the paid paymentId; settling a paid order keeps its unit', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await activities.placeOrder(order, ahead());

  expect(await activities.payOrder(order, { paymentId: 'wrong', amount: 699 })).toEqual({ error: 'AMOUNT_MISMATCH' });
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PENDING', paymentId: null });
  expect(await activities.payOrder(order, { paymentId: 'pay-1', amount: 700 })).toEqual({ status: 'PAID', paymentId: 'pay-1' });
  expect(await activities.payOrder(order, { paymentId: 'pay-1', amount: 700 })).toEqual({ status: 'PAID', paymentId: 'pay-1' });
  expect(await activities.payOrder(order, { paymentId: 'pay-1', amount: 701 })).toEqual({ error: 'AMOUNT_MISMATCH' });
  expect(await activities.payOrder(order, { paymentId: 'pay-2', amount: 700 })).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: 'pay-1' });

  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'PAID', paymentId: 'pay-1' });
  expect(await sold(order.itemId)).toBe(1);
  expect(await stock(order)).toBe(4);
  const seen = await tap.collect([order.orderId]);
  expect(seen.map((e) => e.type)).toEqual(['OrderPlaced', 'OrderPaid', 'OrderPaid', 'OrderPaid']);
  expect(seen.filter((e) => e.type === 'OrderPaid').every((e) => e.paymentId === 'pay-1' && e.amount === 700)).toBe(true);
});

test('payOrder racing the order’s insert (the row appears between its UPDATE and its SELECT) pays, not ORDER_NOT_PENDING', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  // A pool whose first statement (payOrder's UPDATE, which finds no row) is followed by the insert, as a
  // workflow storing the order at that moment would do.
  let inserted = false;
  const racing = new Proxy(clients.pool, {
    get(target, key, receiver) {
      if (key !== 'query') return Reflect.get(target, key, receiver);
      return async (...args: Parameters<Pool['query']>) => {
        const result = await (target.query as (...a: unknown[]) => Promise<unknown>)(...args);
        if (!inserted) {
          inserted = true;
          await persistOrder(target, order, new Date(Date.now() + 60_000));
        }
        return result;
      };
    },
  });
  expect(await payOrder(racing, order.orderId, 'racing', 700)).toEqual({ status: 'PAID', paymentId: 'racing' });
  expect(inserted).toBe(true);
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: 'racing' });
});

test('payOrder after the deadline: PAYMENT_WINDOW_CLOSED while still PENDING and once EXPIRED; the expiry wins and the unit comes back', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await activities.placeOrder(order, passed());

  expect(await activities.payOrder(order, { paymentId: 'late', amount: 700 })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect((await findOrder(clients.pool, order.orderId))?.status).toBe('PENDING');
  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.payOrder(order, { paymentId: 'later', amount: 700 })).toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'EXPIRED', paymentId: null });
  expect(await stock(order)).toBe(5);
});

test('payOrder and settleOrder on an order without a row fail non-retryably as ORDER_NOT_FOUND', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = await reserved(sale);
  // One at a time: a second call made up front could reject before its expectation is attached.
  for (const attempt of [() => activities.payOrder(order, { paymentId: 'p', amount: 1999 }), () => activities.settleOrder(order, Date.now())]) {
    await expect(attempt()).rejects.toMatchObject({ type: 'ORDER_NOT_FOUND', nonRetryable: true });
  }
});

test('placeAndSettle: past the deadline, twice: stored then EXPIRED, sold back to where it was, the unit back once, OrderPlaced then OrderExpired; before it, only placed', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const late = await reserved(sale);
  expect(await activities.placeAndSettle(late, passed(), Date.now())).toEqual({ status: 'EXPIRED' });
  expect(await activities.placeAndSettle(late, passed(), Date.now())).toEqual({ status: 'EXPIRED' });
  expect((await findOrder(clients.pool, late.orderId))?.status).toBe('EXPIRED');
  expect(await sold(late.itemId)).toBe(0);
  expect(await stock(late)).toBe(5);
  expect(await eventTypes(late)).toEqual(['OrderPlaced', 'OrderExpired', 'OrderPlaced', 'OrderExpired']);

  const early = await reserved(sale);
  expect(await activities.placeAndSettle(early, ahead(), Date.now())).toEqual({ status: 'PENDING' });
  expect((await findOrder(clients.pool, early.orderId))?.status).toBe('PENDING');
  expect(await sold(early.itemId)).toBe(1);
  expect(await stock(early)).toBe(4);
  expect(await eventTypes(early)).toEqual(['OrderPlaced']);
});

test('placeAndSettle of an order the payment route stored and paid: PAID, its unit kept, OrderPlaced then OrderPaid', async () => {
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: 700 });
  const order = await reserved(sale);
  await persistOrder(clients.pool, order, new Date(ahead()));
  expect(await payOrder(clients.pool, order.orderId, 'by-route', 700)).toEqual({ status: 'PAID', paymentId: 'by-route' });
  expect(await activities.placeAndSettle(order, ahead(), Date.now() + 700_000)).toEqual({ status: 'PAID', paymentId: 'by-route' });
  expect(await sold(order.itemId)).toBe(1);
  expect(await stock(order)).toBe(4);
  expect(await eventTypes(order)).toEqual(['OrderPlaced', 'OrderPaid']);
});

test('storePaidOrder (the payment route, before the workflow stored the order): PAID and counted once; nothing written past the deadline, over a row, for a buyer with another live order or an exhausted item', async () => {
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: 700 });
  const order = await reserved(sale);
  expect(await storePaidOrder(clients.pool, order, new Date(ahead()), 'route-1')).toBe(true);
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: 'route-1', priceMinor: 700 });
  expect(await sold(order.itemId)).toBe(1);
  // Again, or with another payment: the row exists, nothing changes.
  expect(await storePaidOrder(clients.pool, order, new Date(ahead()), 'route-1')).toBe(false);
  expect(await storePaidOrder(clients.pool, order, new Date(ahead()), 'route-2')).toBe(false);
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: 'route-1' });
  expect(await sold(order.itemId)).toBe(1);
  // The workflow's placeOrder then finds the row PAID, and settling keeps the unit.
  expect(await activities.placeOrder(order, ahead())).toEqual({ status: 'PAID' });
  expect(await activities.settleOrder(order, Date.now())).toEqual({ status: 'PAID', paymentId: 'route-1' });
  expect(await sold(order.itemId)).toBe(1);

  // Past the deadline by PostgreSQL's clock: no row.
  const late = await reserved(sale);
  expect(await storePaidOrder(clients.pool, late, new Date(passed()), 'route-late')).toBe(false);
  expect(await findOrder(clients.pool, late.orderId)).toBeUndefined();

  // The same buyer holds a live order in the sale (I3): no row for the second one.
  const second = { ...late, orderId: randomUUID(), userId: order.userId };
  expect(await storePaidOrder(clients.pool, second, new Date(ahead()), 'route-second')).toBe(false);
  expect(await findOrder(clients.pool, second.orderId)).toBeUndefined();

  // The last unit goes to one order; PostgreSQL has none left for another (I1): no row, sold unchanged.
  expect(await storePaidOrder(clients.pool, late, new Date(ahead()), 'route-last')).toBe(true);
  const over = { ...late, orderId: randomUUID(), userId: `buyer-${randomUUID()}` };
  expect(await storePaidOrder(clients.pool, over, new Date(ahead()), 'route-over')).toBe(false);
  expect(await findOrder(clients.pool, over.orderId)).toBeUndefined();
  expect(await sold(order.itemId)).toBe(2);
});
