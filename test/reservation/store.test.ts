/**
 * ReservationStore (reserve.lua / release.lua) directly against the real Redis: a release frees exactly the
 * order it names, once (I2, I4, I5); a reservation or a release run twice for one order (a resend after a lost
 * reply) leaves Redis as the first run did and answers the same; and the scripts survive a flushed script cache
 * (EVALSHA → EVAL).
 * Each test uses its own sale, whose keys (start queue included) are deleted afterwards so that no starter
 * starts workflows for these orders.
 */
import { randomUUID } from 'node:crypto';
import type { OrderInput } from '../../src/order/types';
import { saleKeys } from '../../src/reservation/layout';
import { loadSale, type Sale } from '../../src/sale/sales';
import { connectClients, createTestSale, testConfig, unload, type Clients } from '../support/helpers';

const config = testConfig();
let clients: Clients;
const sales: Sale[] = [];

beforeAll(() => {
  clients = connectClients(config);
});

afterAll(async () => {
  for (const sale of sales) {
    const keys = saleKeys(sale.saleId);
    await clients.redis.del(keys.buyers, keys.reservations, keys.startQueue, keys.loaded, keys.released, ...sale.items.flatMap((i) => [keys.stock(i.itemId), keys.returns(i.itemId)]));
  }
  await clients.close();
});

/** An order of one unit at the sale's terms, reserved now. */
function order(saleId: number, itemId: number, userId: string, orderId: string): OrderInput {
  return { orderId, saleId, itemId, userId, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() };
}

async function newSale(quantity: number) {
  const sale = await createTestSale(clients, { quantities: [quantity] });
  sales.push(sale);
  const itemId = sale.items[0].itemId;
  const stock = async () => (await clients.store.view.stock(sale.saleId, [itemId])).get(itemId);
  return { saleId: sale.saleId, itemId, keys: saleKeys(sale.saleId), stock };
}

test('releasing the same order twice returns exactly one unit', async () => {
  const { saleId, itemId, keys, stock } = await newSale(10);
  const orderId = randomUUID();
  expect(await clients.store.reserve(order(saleId, itemId, 'twice', orderId))).toEqual({ kind: 'RESERVED', stockLeft: 9, stockShard: 0, unit: 1, stockEpoch: 1 });

  await clients.store.release({ saleId, itemId, orderId, userId: 'twice' });
  expect(await stock()).toBe(10);
  await clients.store.release({ saleId, itemId, orderId, userId: 'twice' });
  expect(await stock()).toBe(10);
  // The order's unit went back once, at the tail of the free units.
  expect(await clients.redis.lrange(keys.stock(itemId), 0, -1)).toEqual(['2', '3', '4', '5', '6', '7', '8', '9', '10', '1']);
  expect(await clients.redis.exists(keys.buyers, keys.reservations)).toBe(0);
});

test('a reservation run twice for one order, and its release run twice: Redis as after the first run, the same answers', async () => {
  const { saleId, itemId, keys, stock } = await newSale(10);
  const snapshot = async () => ({
    stock: await stock(),
    buyers: await clients.redis.hgetall(keys.buyers),
    reservations: await clients.redis.hgetall(keys.reservations),
    queue: await clients.redis.xrange(keys.startQueue, '-', '+'),
    returns: await clients.redis.get(keys.returns(itemId)),
  });
  const once = order(saleId, itemId, 'resent', randomUUID());
  const first = await clients.store.reserve(once);
  const afterFirst = await snapshot();
  expect(first).toEqual({ kind: 'RESERVED', stockLeft: 9, stockShard: 0, unit: 1, stockEpoch: 1 });
  expect(afterFirst.queue).toHaveLength(1);
  expect(await clients.store.reserve(once)).toEqual(first);
  expect(await snapshot()).toEqual(afterFirst);

  await clients.store.release(once);
  const afterRelease = await snapshot();
  expect([afterRelease.stock, afterRelease.buyers, afterRelease.reservations]).toEqual([10, {}, {}]);
  await clients.store.release(once);
  expect(await snapshot()).toEqual(afterRelease);
  // Run once more after the order ended and gave its unit back (a rerun seconds late): it takes nothing, queues
  // nothing, and answers as the first run did, without a unit: the order holds none any more.
  expect(await clients.store.reserve(once)).toEqual({ kind: 'RESERVED', stockLeft: 10, stockShard: 0 });
  expect(await snapshot()).toEqual(afterRelease);
});

test('a stale release (A, then the buyer reserves B, then A again) changes nothing; the live order stays B', async () => {
  const { saleId, itemId, keys, stock } = await newSale(10);
  const orderA = randomUUID();
  const orderB = randomUUID();
  await clients.store.reserve(order(saleId, itemId, 'stale', orderA));
  await clients.store.release({ saleId, itemId, orderId: orderA, userId: 'stale' });
  // A's unit 1 went back to the tail of the list: B takes the head, unit 2.
  expect(await clients.store.reserve(order(saleId, itemId, 'stale', orderB))).toEqual({ kind: 'RESERVED', stockLeft: 9, stockShard: 0, unit: 2, stockEpoch: 1 });

  await clients.store.release({ saleId, itemId, orderId: orderA, userId: 'stale' });
  expect(await stock()).toBe(9);
  expect(await clients.redis.hgetall(keys.buyers)).toEqual({ stale: orderB });
  expect(Object.keys(await clients.redis.hgetall(keys.reservations))).toEqual([orderB]);
  // And the buyer is still held to one order.
  expect(await clients.store.reserve(order(saleId, itemId, 'stale', randomUUID()))).toEqual({ kind: 'ALREADY_PURCHASED', orderId: orderB });
});

test('a release naming another item than the reservation is refused and changes nothing', async () => {
  const { saleId, itemId, keys, stock } = await newSale(3);
  const orderId = randomUUID();
  await clients.store.reserve(order(saleId, itemId, 'mismatch', orderId));
  const before = await clients.redis.hgetall(keys.reservations);

  await expect(clients.store.release({ saleId, itemId: itemId + 1, orderId, userId: 'mismatch' })).rejects.toThrow(/ITEM_MISMATCH/);
  expect(await stock()).toBe(2);
  expect(await clients.redis.hgetall(keys.reservations)).toEqual(before);
});

test('refusals write nothing: sold out, already purchased, stock not loaded', async () => {
  const { saleId, itemId, keys, stock } = await newSale(1);
  const held = randomUUID();
  await clients.store.reserve(order(saleId, itemId, 'first', held));
  const snapshot = async () => [await stock(), await clients.redis.hgetall(keys.buyers), await clients.redis.hgetall(keys.reservations)];
  const before = await snapshot();

  expect(await clients.store.reserve(order(saleId, itemId, 'second', randomUUID()))).toEqual({ kind: 'SOLD_OUT' });
  expect(await clients.store.reserve(order(saleId, itemId, 'first', randomUUID()))).toEqual({ kind: 'ALREADY_PURCHASED', orderId: held });
  expect(await snapshot()).toEqual(before);

  // The shard lost its data: its loaded mark is gone (an empty stock list has no key at all).
  await clients.redis.del(keys.stock(itemId), keys.loaded);
  expect(await clients.store.reserve(order(saleId, itemId, 'third', randomUUID()))).toEqual({ kind: 'NOT_LOADED' });
  expect(await clients.redis.hgetall(keys.buyers)).toEqual(before[1]);
});

test('after SCRIPT FLUSH, reserve and release still work (EVALSHA falls back to EVAL)', async () => {
  const { saleId, itemId, stock } = await newSale(5);
  await clients.store.reserve(order(saleId, itemId, 'warm-up', randomUUID()));

  await clients.redis.script('FLUSH');
  const orderId = randomUUID();
  expect(await clients.store.reserve(order(saleId, itemId, 'after-flush', orderId))).toEqual({ kind: 'RESERVED', stockLeft: 3, stockShard: 0, unit: 2, stockEpoch: 1 });
  await clients.redis.script('FLUSH');
  await clients.store.release({ saleId, itemId, orderId, userId: 'after-flush' });
  expect(await stock()).toBe(4);
});

test('three loads of an unloaded sale at once list each unit once; a load of a loaded sale changes nothing', async () => {
  const { saleId, itemId, keys } = await newSale(25_000);
  await unload(clients, saleId);
  await Promise.all([1, 2, 3].map(() => loadSale(clients.pool, clients.store, saleId, false)));
  expect(await clients.redis.get(keys.loaded)).toBe('1');
  const units = (await clients.redis.lrange(keys.stock(itemId), 0, -1)).map(Number);
  expect(units).toEqual(Array.from({ length: 25_000 }, (_, i) => i + 1));
  expect(await clients.redis.pttl(keys.stock(itemId))).toBe(-1);
  // The losers' staged lists are gone: nothing of the sale is left but its own keys.
  expect(await clients.redis.keys(`${keys.stock(itemId)}:staged:*`)).toEqual([]);

  await clients.redis.lpop(keys.stock(itemId));
  await loadSale(clients.pool, clients.store, saleId, false);
  expect(await clients.redis.llen(keys.stock(itemId))).toBe(24_999);
});
