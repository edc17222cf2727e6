/**
 * The workflow's activities called directly (no Temporal) against the real PostgreSQL, Redis and Kafka: each is
 * run twice, as a retry would, and has one effect (I5). The activities need no activity context: their
 * business refusals are ApplicationFailure values, which are plain errors.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { createActivities, type Activities } from '../../src/activities';
import type { OrderInput } from '../../src/domain';
import { createKafka, EventPublisher } from '../../src/events';
import { findOrder } from '../../src/orders';
import { saleKeys } from '../../src/reservations';
import type { Sale } from '../../src/sales';
import { connectClients, createTestSale, testConfig, type Clients } from '../helpers';

const config = testConfig();
let clients: Clients;
let events: EventPublisher;
let activities: Activities;

beforeAll(async () => {
  clients = connectClients(config);
  events = await EventPublisher.connect(createKafka(config, 'test-activities'), config.KAFKA_TOPIC, config.KAFKA_IDEMPOTENT);
  activities = createActivities({ pool: clients.pool, store: clients.store, events });
});

afterAll(async () => {
  await events?.disconnect();
  await clients?.close();
});

function orderFor(sale: Sale, itemIndex = 0, userId = `buyer-${randomUUID()}`): OrderInput {
  return {
    orderId: randomUUID(),
    saleId: sale.saleId,
    itemId: sale.items[itemIndex].itemId,
    userId,
    priceMinor: sale.items[itemIndex].priceMinor,
    paymentWindowMs: sale.paymentWindowMs,
    reservedAtMs: Date.now(),
  };
}

const deadline = () => new Date(Date.now() + 600_000).toISOString();

async function sold(itemId: number): Promise<number> {
  return (await clients.pool.query<{ sold: number }>('SELECT sold FROM items WHERE id = $1', [itemId])).rows[0].sold;
}

async function ordersOfSale(saleId: number): Promise<{ status: string; reason: string | null }[]> {
  return (await clients.pool.query('SELECT status, reason FROM orders WHERE sale_id = $1', [saleId])).rows;
}

test('persistOrder twice: one PENDING row, sold counted once', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = orderFor(sale);
  const at = deadline();

  expect(await activities.persistOrder(order, at)).toEqual({ status: 'PENDING', reason: null });
  expect(await activities.persistOrder(order, at)).toEqual({ status: 'PENDING', reason: null });
  expect(await ordersOfSale(sale.saleId)).toEqual([{ status: 'PENDING', reason: null }]);
  expect(await sold(order.itemId)).toBe(1);
});

test('persistOrder when PostgreSQL has no unit left: REJECTED SOLD_OUT, not counted, same answer on retry', async () => {
  const sale = await createTestSale(clients, { quantities: [2] });
  await clients.pool.query('UPDATE items SET sold = quantity WHERE id = $1', [sale.items[0].itemId]);
  const order = orderFor(sale);

  expect(await activities.persistOrder(order, deadline())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await activities.persistOrder(order, deadline())).toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(await ordersOfSale(sale.saleId)).toEqual([{ status: 'REJECTED', reason: 'SOLD_OUT' }]);
  expect(await sold(order.itemId)).toBe(2);
});

test('persistOrder for a second order of the same buyer in the sale (other item): REJECTED ALREADY_PURCHASED', async () => {
  const sale = await createTestSale(clients, { quantities: [5, 5] });
  const first = orderFor(sale, 0);
  const second = orderFor(sale, 1, first.userId);

  expect(await activities.persistOrder(first, deadline())).toEqual({ status: 'PENDING', reason: null });
  expect(await activities.persistOrder(second, deadline())).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await activities.persistOrder(second, deadline())).toEqual({ status: 'REJECTED', reason: 'ALREADY_PURCHASED' });
  expect(await sold(first.itemId)).toBe(1);
  expect(await sold(second.itemId)).toBe(0);
  expect((await findOrder(clients.pool, first.orderId))?.status).toBe('PENDING');

  // I3: once the first order has expired, the buyer may buy again.
  expect(await activities.expireOrder(first.orderId)).toBe(true);
  const third = orderFor(sale, 1, first.userId);
  expect(await activities.persistOrder(third, deadline())).toEqual({ status: 'PENDING', reason: null });
  expect(await sold(third.itemId)).toBe(1);
});

test('persistOrder that PostgreSQL refuses (negative price) fails non-retryably as CONSTRAINT_VIOLATION', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = { ...orderFor(sale), priceMinor: -1 };

  const failure = await activities.persistOrder(order, deadline()).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(failure).toBeInstanceOf(ApplicationFailure);
  expect(failure).toMatchObject({ type: 'CONSTRAINT_VIOLATION', nonRetryable: true });
  expect(await ordersOfSale(sale.saleId)).toEqual([]);
  expect(await sold(order.itemId)).toBe(0);
});

test('expireOrder twice: EXPIRED, sold − 1 once', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = orderFor(sale);
  await activities.persistOrder(order, deadline());
  expect(await sold(order.itemId)).toBe(1);

  expect(await activities.expireOrder(order.orderId)).toBe(true);
  expect(await activities.expireOrder(order.orderId)).toBe(false);
  expect((await findOrder(clients.pool, order.orderId))?.status).toBe('EXPIRED');
  expect(await sold(order.itemId)).toBe(0);
});

test('releaseReservation twice: stock + 1 once; a stale release after the buyer reserved again frees nothing', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const order = orderFor(sale);
  const keys = saleKeys(sale.saleId);
  expect(await clients.store.reserve(order.saleId, order.itemId, order.userId, order.orderId, order.reservedAtMs)).toEqual({
    kind: 'RESERVED',
    stockLeft: 2,
  });

  expect(await activities.releaseReservation(order.saleId, order.itemId, order.orderId)).toBe(true);
  expect(await activities.releaseReservation(order.saleId, order.itemId, order.orderId)).toBe(false);
  expect((await clients.store.stock(sale.saleId, [order.itemId])).get(order.itemId)).toBe(3);
  expect(await clients.redis.hget(keys.reservations, order.orderId)).toBeNull();
  expect(await clients.redis.hget(keys.buyers, order.userId)).toBeNull();

  const again = orderFor(sale, 0, order.userId);
  expect(await clients.store.reserve(again.saleId, again.itemId, again.userId, again.orderId, again.reservedAtMs)).toEqual({
    kind: 'RESERVED',
    stockLeft: 2,
  });
  expect(await activities.releaseReservation(order.saleId, order.itemId, order.orderId)).toBe(false);
  expect((await clients.store.stock(sale.saleId, [order.itemId])).get(order.itemId)).toBe(2);
  expect(await clients.redis.hget(keys.buyers, order.userId)).toBe(again.orderId);
  expect(await clients.redis.hget(keys.reservations, again.orderId)).not.toBeNull();
});

test('markPaid twice with the same payment succeeds; on an expired order it fails non-retryably', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const order = orderFor(sale);
  await activities.persistOrder(order, deadline());

  await expect(activities.markPaid(order.orderId, 'pay-1')).resolves.toBeUndefined();
  await expect(activities.markPaid(order.orderId, 'pay-1')).resolves.toBeUndefined();
  expect(await findOrder(clients.pool, order.orderId)).toMatchObject({ status: 'PAID', paymentId: 'pay-1' });
  expect(await sold(order.itemId)).toBe(1);
  expect(await activities.expireOrder(order.orderId)).toBe(false);
  expect(await sold(order.itemId)).toBe(1);

  const expired = orderFor(sale);
  await activities.persistOrder(expired, deadline());
  await activities.expireOrder(expired.orderId);
  const failure = await activities.markPaid(expired.orderId, 'pay-2').then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(failure).toBeInstanceOf(ApplicationFailure);
  expect(failure).toMatchObject({ type: 'ORDER_NOT_PENDING', nonRetryable: true });
  expect(await findOrder(clients.pool, expired.orderId)).toMatchObject({ status: 'EXPIRED', paymentId: null });
});
