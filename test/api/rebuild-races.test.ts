/**
 * A rebuild against what runs beside it (src/reservation/loading.ts, src/sale/sales.ts, src/order/store.ts), on the
 * real Redis and PostgreSQL, without workflows (each test deletes its sale's start queue):
 * - a plain load of a shard that lost its data is refused (REBUILD_NEEDED) while its orders are only in Redis or
 *   only in Temporal;
 * - a load and a forced rebuild started together leave the shard with its units, each once;
 * - an order a starter read before a rebuild and stores after it is stored REJECTED (STOCK_REBUILT), not live on
 *   a unit the rebuild listed free; one stored while the rebuild moves the epoch on is waited for and counted.
 */
import { randomUUID } from 'node:crypto';
import { newOrderId } from '../../src/order/orderId';
import type { OrderInput } from '../../src/order/types';
import { saleKeys } from '../../src/reservation/layout';
import { loadSale, RebuildNeeded } from '../../src/sale/sales';
import { connectTemporal, startOrderWorkflow } from '../../src/workflows/client';
import { connectClients, createTestSale, orderRow, reserveUnit, testConfig, type Clients } from '../support/helpers';

const config = testConfig();
let clients: Clients;
beforeAll(() => {
  clients = connectClients(config);
});
afterAll(() => clients?.close());

async function newSale(quantity: number) {
  const sale = await createTestSale(clients, { quantities: [quantity] });
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);
  const order = (): OrderInput => ({ orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId, userId: `buyer-${randomUUID()}`, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() });
  /** Every key of the sale's one shard, as a Redis that restarted empty. */
  const lose = () => clients.redis.del(keys.buyers, keys.reservations, keys.claims, keys.stock(itemId), keys.returns(itemId), keys.startQueue, keys.loaded, keys.released);
  const units = async () => (await clients.redis.lrange(keys.stock(itemId), 0, -1)).map(Number).sort((a, b) => a - b);
  return { saleId: sale.saleId, itemId, keys, order, lose, units };
}

test('a plain load of a shard that lost its data while its orders were only in Redis, or only in Temporal, is refused with REBUILD_NEEDED', async () => {
  const { saleId, keys, order, lose, units } = await newSale(5);
  await reserveUnit(clients, order());
  // Started by hand on a task queue no worker polls, not through the starter: known to Temporal, not PostgreSQL.
  const inTemporal = await reserveUnit(clients, order());
  await clients.redis.del(keys.startQueue);
  const temporal = await connectTemporal(config);
  try {
    await startOrderWorkflow(temporal, `${config.TEMPORAL_TASK_QUEUE}-unpolled`, inTemporal);
    expect(await clients.pool.query('SELECT 1 FROM orders WHERE sale_id = $1', [saleId])).toMatchObject({ rowCount: 0 });
    await lose();
    await expect(loadSale(clients.pool, clients.store, saleId, false)).rejects.toThrow(RebuildNeeded);
    expect(await clients.redis.exists(keys.loaded)).toBe(0);
    // The rebuild is the way back: every unit free (no store it reads knew either order)...
    await loadSale(clients.pool, clients.store, saleId, true);
    expect(await units()).toEqual([1, 2, 3, 4, 5]);
    // ...and the order only Temporal knew, stored now, is fenced: its unit went back to the stock.
    expect(await clients.orders.place(inTemporal)).toEqual({ status: 'REJECTED', reason: 'STOCK_REBUILT' });
  } finally {
    await temporal.workflow.getHandle(inTemporal.orderId).terminate('rebuild-races: no worker runs it').catch(() => undefined);
    await temporal.connection.close();
  }
});

test('a load and a forced rebuild started together: the shard ends with its units, each once, and one epoch', async () => {
  for (let round = 0; round < 5; round++) {
    const { saleId, keys, order, lose, units } = await newSale(2000);
    const held = await reserveUnit(clients, order());
    await clients.redis.del(keys.startQueue);
    expect(await clients.orders.place(held)).toEqual({ status: 'PENDING' });
    await lose();
    const outcomes = await Promise.allSettled([loadSale(clients.pool, clients.store, saleId, false), loadSale(clients.pool, clients.store, saleId, true, true)]);
    await clients.redis.del(keys.startQueue);
    // The rebuild goes through; the load is refused (it saw the loss) or finds the shard rebuilt.
    expect(outcomes[1].status).toBe('fulfilled');
    if (outcomes[0].status === 'rejected') expect(outcomes[0].reason).toBeInstanceOf(RebuildNeeded);
    expect(await units()).toEqual(Array.from({ length: 1999 }, (_, i) => i + 2));
    expect(await clients.redis.hget(keys.reservations, held.orderId)).toMatch(/\|1\|2$/);
    expect(await clients.redis.get(keys.loaded)).toBe('2');
    expect(await clients.redis.keys(`${keys.stock(held.itemId)}:staged:*`)).toEqual([]);
  }
});

test('an order read before a rebuild and stored after it is REJECTED (STOCK_REBUILT); one stored while the epoch moves on is waited for and counted', async () => {
  const { saleId, keys, order, lose, units } = await newSale(3);
  const late = await reserveUnit(clients, order());
  const during = await reserveUnit(clients, order());
  await clients.redis.del(keys.startQueue);
  await lose();

  // `during` is being stored as the rebuild begins: its statement holds the shard's epoch row FOR SHARE.
  const tx = await clients.pool.connect();
  try {
    await tx.query('BEGIN');
    await tx.query('SELECT epoch FROM stock_shards WHERE sale_id = $1 AND shard = 0 FOR SHARE', [saleId]);
    const rebuilding = loadSale(clients.pool, clients.store, saleId, true);
    // The rebuild's move of the epoch waits behind the share lock, as it would behind a store under way.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await clients.redis.exists(keys.loaded)).toBe(0);
    await tx.query(
      `INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at, stock_shard, unit, item_quantity)
       VALUES ($1, $2, $3, $4, 'PENDING', 1999, now(), now() + interval '10 minutes', 0, $5, 3)`,
      [during.orderId, saleId, during.itemId, during.userId, during.unit],
    );
    await tx.query('COMMIT');
    await rebuilding;
    // The rebuild queued `during` again for a start: no workflow here.
    await clients.redis.del(keys.startQueue);
  } finally {
    tx.release();
  }
  // The rebuild saw `during` (its unit stays out of stock, its reservation back); `late` it could not know.
  expect(await clients.redis.hexists(keys.reservations, during.orderId)).toBe(1);
  expect(await units()).toEqual([1, 3]);
  // A starter that read `late` before the loss stores it now: its epoch is over, and its unit 1 may be anyone's.
  expect(await clients.orders.place(late)).toEqual({ status: 'REJECTED', reason: 'STOCK_REBUILT' });
  expect(await orderRow(clients.pool, late.orderId)).toMatchObject({ status: 'REJECTED', reason: 'STOCK_REBUILT' });
  // The payment route, with the terms of a reservation read before the loss, stores nothing live either.
  const paidLate = { ...late, orderId: newOrderId(saleId), userId: `buyer-${randomUUID()}` };
  expect(await clients.orders.pay(paidLate.orderId, { paymentId: `p-${paidLate.orderId}`, amount: 1999 }, paidLate)).toEqual({ error: 'ORDER_NOT_PENDING' });
  expect(await orderRow(clients.pool, paidLate.orderId)).toMatchObject({ status: 'REJECTED', reason: 'STOCK_REBUILT' });
  // A new buyer gets unit 1, stored live under the new epoch.
  const fresh = await reserveUnit(clients, order());
  expect([fresh.unit, fresh.stockEpoch]).toEqual([1, 2]);
  await clients.redis.del(keys.startQueue);
  expect(await clients.orders.place(fresh)).toEqual({ status: 'PENDING' });
});
