/**
 * The reconciler's repairs as Redis runs them (lua/repair.lua), each compare-and-set against the real server: a
 * repair whose premise changed between the reconciler's read and its run writes nothing, and one run twice writes
 * once. In particular a unit read as neither free nor held is not freed while a reservation holds it: it can pass
 * through the free list between the reads of the list and of the reservations (given back, then taken again),
 * which the fault campaign once caught as a unit listed free while a live order held it.
 */
import { randomUUID } from 'node:crypto';
import { newOrderId } from '../../src/order/orderId';
import type { OrderInput } from '../../src/order/types';
import type { Pool } from 'pg';
import { reservationValue } from '../../src/reservation/formats';
import { saleKeys } from '../../src/reservation/layout';
import { applyRepairs } from '../../src/reservation/repairs';
import type { Sale } from '../../src/sale/sales';
import { connectClients, createTestSale, orderRow, testConfig, type Clients } from '../support/helpers';

const config = testConfig();
let clients: Clients;

beforeAll(() => {
  clients = connectClients(config);
});
afterAll(async () => {
  await clients?.close();
});

/** Runs one repair on the sale's one shard, at its current epoch (or the one given). */
async function repair(sale: Sale, op: string, args: string[], epoch?: string): Promise<unknown> {
  const keys = saleKeys(sale.saleId);
  const itemId = sale.items[0].itemId;
  const at = epoch ?? ((await clients.redis.get(keys.loaded)) as string);
  return clients.redis.repair(keys.loaded, keys.rebuilding, keys.reservations, keys.buyers, keys.released, keys.stock(itemId), keys.returns(itemId), op, at, ...args);
}

/** A reservation of the sale's item made by the store (its payment window 60 s from reservedAtMs), as a press makes it (its start queue entry dropped). */
async function reserved(sale: Sale, reservedAtMs = Date.now()): Promise<OrderInput> {
  const order: OrderInput = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId: sale.items[0].itemId, userId: `repair-${randomUUID()}`, priceMinor: 100, paymentWindowMs: 60_000, reservedAtMs };
  const outcome = await clients.store.reserve(order);
  if (outcome.kind !== 'RESERVED') throw new Error(`not reserved: ${outcome.kind}`);
  await clients.redis.del(saleKeys(sale.saleId).startQueue);
  return { ...order, unit: outcome.unit, stockShard: 0, stockEpoch: outcome.stockEpoch };
}

const free = (sale: Sale) => clients.redis.lrange(saleKeys(sale.saleId).stock(sale.items[0].itemId), 0, -1);

test('FREE: a unit taken again since the reads is left held; a unit neither free nor held is freed once', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  // Unit 1 read as neither free nor held; since then given back and taken again by another press.
  const order = await reserved(sale);
  expect(order.unit).toBe(1);
  expect(await repair(sale, 'FREE', ['1', String(sale.items[0].itemId)])).toBe(0);
  expect(await free(sale)).toEqual(['2', '3']);
  // Unit 1 lost for real (its reservation's delete kept, the push lost): freed, and a second run writes nothing.
  await clients.redis.hdel(saleKeys(sale.saleId).reservations, order.orderId);
  expect(await repair(sale, 'FREE', ['1', String(sale.items[0].itemId)])).toBe(1);
  expect(await repair(sale, 'FREE', ['1', String(sale.items[0].itemId)])).toBe(0);
  expect(await free(sale)).toEqual(['2', '3', '1']);
});

test('RELEASE and RESTORE: compare-and-set on the reservation; a released order is never restored; another epoch writes nothing', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const order = await reserved(sale);
  const value = reservationValue(order);
  const keys = saleKeys(sale.saleId);
  expect(await repair(sale, 'RELEASE', [order.orderId, `${value}-not-it`, '1'])).toBe(0);
  expect(await repair(sale, 'RELEASE', [order.orderId, value, '1'], '999')).toBe('SKIPPED');
  expect(await repair(sale, 'RELEASE', [order.orderId, value, '1'])).toBe(1);
  expect(await repair(sale, 'RELEASE', [order.orderId, value, '1'])).toBe(0);
  expect(await free(sale)).toEqual(['2', '3', '1']);
  expect(await clients.redis.hget(keys.buyers, order.userId)).toBeNull();
  // Released: its reservation is not written back, whatever PostgreSQL said when it was read.
  expect(await repair(sale, 'RESTORE', [order.orderId, value, '1'])).toBe(0);
  expect(await clients.redis.hget(keys.reservations, order.orderId)).toBeNull();

  const lost = { ...order, orderId: newOrderId(sale.saleId) };
  expect(await repair(sale, 'RESTORE', [lost.orderId, reservationValue(lost), '1'])).toBe(1);
  expect(await repair(sale, 'RESTORE', [lost.orderId, reservationValue(lost), '1'])).toBe(0);
  expect(await free(sale)).toEqual(['2', '3']);
});

test('entries, taken units and duplicates: each written only while what was read still stands', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const order = await reserved(sale);
  const keys = saleKeys(sale.saleId);
  expect(await repair(sale, 'SET_BUYER', ['someone', order.orderId, 'an-order-that-ended'])).toBe(0);
  expect(await repair(sale, 'SET_BUYER', ['someone', order.orderId, ''])).toBe(1);
  expect(await repair(sale, 'CLEAR_BUYER', ['someone', 'another-order'])).toBe(0);
  expect(await repair(sale, 'CLEAR_BUYER', ['someone', order.orderId])).toBe(1);
  // Unit 1, held by the order, also listed free twice over.
  await clients.redis.rpush(keys.stock(order.itemId), '1', '1');
  expect(await repair(sale, 'DEDUPE', ['1'])).toBe(1);
  expect(await free(sale)).toEqual(['2', '3', '1']);
  expect(await repair(sale, 'TAKE', ['1', order.orderId, 'not-its-value'])).toBe(0);
  expect(await repair(sale, 'TAKE', ['1', order.orderId, reservationValue(order)])).toBe(1);
  expect(await free(sale)).toEqual(['2', '3']);
});

test('an entry set for a live order that ends between the look at PostgreSQL and the write (its release first) is cleared at once', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const order = await reserved(sale, Date.now() - 61_000);
  await clients.orders.place(order);
  const keys = saleKeys(sale.saleId);
  // What the reconciler found: a live order without its buyer's entry.
  await clients.redis.hdel(keys.buyers, order.userId);
  // Right after the look before the write: the order expires and its release runs (it finds no entry to clear).
  let looks = 0;
  const pool = new Proxy(clients.pool, {
    get(target, prop) {
      if (prop !== 'query') return Reflect.get(target, prop) as unknown;
      return async (...args: Parameters<Pool['query']>) => {
        const res = await (target.query as (...a: unknown[]) => Promise<unknown>)(...args);
        if (String(args[0]).includes('"ageMs"') && looks++ === 0) {
          await clients.orders.settle(order, Date.now());
          await clients.store.release(order);
        }
        return res;
      };
    },
  });
  const layout = await clients.store.layouts.get(sale.saleId);
  const epochs = new Map([[0, (await clients.redis.get(keys.loaded)) as string]]);
  const applied = await applyRepairs(clients.redis, pool, layout, { repairs: [{ k: 0, kind: 'setBuyer', userId: order.userId, orderId: order.orderId, expected: '', seen: 'test' }], epochs });
  expect(applied.map((r) => r.kind)).toEqual(['setBuyer']);
  expect(await orderRow(clients.pool, order.orderId)).toMatchObject({ status: 'EXPIRED' });
  expect(looks).toBe(2);
  expect(await clients.redis.hget(keys.buyers, order.userId)).toBeNull();
});
