/**
 * The audit's I1 and I2 checks read the unit slots (src/audit/): a sale whose live orders each hold their own
 * unit, and whose Redis free units are the rest, passes both; a row PostgreSQL would refuse (written with its
 * check dropped for the test) fails I1, a unit both free in Redis and held by a live order fails I2, and two
 * reservations naming each other's unit fail the check of each order against its own reservation.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { auditSale, type Check } from '../../src/audit';
import { createKafka } from '../../src/infra/kafka';
import { newOrderId } from '../../src/order/orderId';
import type { OrderInput } from '../../src/order/types';
import { reservationValue } from '../../src/reservation/formats';
import { saleKeys } from '../../src/reservation/layout';
import { connectTemporal } from '../../src/workflows/client';
import { connectClients, createTestSale, testConfig, type Clients } from '../support/helpers';

const config = testConfig();
let clients: Clients;
let temporal: Client;

beforeAll(async () => {
  clients = connectClients(config);
  temporal = await connectTemporal(config);
});
afterAll(async () => {
  await temporal?.connection.close();
  await clients?.close();
});

/**
 * @returns the audit's checks of I1 (oversell), of I1, I2 (conservation per shard) and of I2, I4 (held = live
 *   orders, each its own unit), by whether each passed
 */
async function unitChecks(saleId: number): Promise<{ I1: boolean; I2: boolean; held: boolean; examples: string[] }> {
  const kafka = createKafka(config, `test-audit-${randomUUID()}`);
  // No worker runs here, so no relay: the events these checks do not read are not waited for.
  const report = await auditSale({ pool: clients.pool, store: clients.store, temporal, kafka, topic: config.KAFKA_TOPIC }, saleId, undefined, { relayWaitMs: 0 });
  const check = (invariant: string) => report.checks.find((c) => c.invariant === invariant) as Check;
  const examples = ['I1', 'I1, I2', 'I2, I4'].flatMap((invariant) => check(invariant).examples ?? []);
  return { I1: check('I1').ok, I2: check('I1, I2').ok, held: check('I2, I4').ok, examples };
}

test('units held once each pass I1 and I2; a live order past the quantity fails I1, a unit free and held fails I2', async () => {
  const sale = await createTestSale(clients, { quantities: [3] });
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);
  const placed: OrderInput[] = [];
  for (let i = 0; i < 2; i++) {
    const order: OrderInput = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId, userId: `buyer-${randomUUID()}`, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() };
    const reserved = await clients.store.reserve(order);
    if (reserved.kind !== 'RESERVED') throw new Error(`not reserved: ${reserved.kind}`);
    placed.push({ ...order, unit: reserved.unit, stockShard: reserved.stockShard, stockEpoch: reserved.stockEpoch });
  }
  // No workflow is to start these orders: the test places them itself.
  await clients.redis.del(keys.startQueue);
  for (const order of placed) expect(await clients.orders.place(order)).toEqual({ status: 'PENDING' });
  expect(placed.map((o) => o.unit)).toEqual([1, 2]);
  expect(await unitChecks(sale.saleId)).toMatchObject({ I1: true, I2: true });

  // Two more live orders in PostgreSQL alone, one on the free unit 3 and one on a unit 4 the item does not have:
  // four live orders of a three-unit item.
  await clients.pool.query('ALTER TABLE orders DROP CONSTRAINT orders_live_unit_of_item');
  const broken = [randomUUID(), randomUUID()];
  try {
    for (const [i, id] of broken.entries()) {
      await clients.pool.query(
        `INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at, unit, item_quantity)
         VALUES ($1, $2, $3, $4, 'PAID', 1999, now(), now() + interval '10 minutes', $5, 3)`,
        [id, sale.saleId, itemId, `intruder-${id}`, 3 + i],
      );
    }
    const audited = await unitChecks(sale.saleId);
    expect(audited).toMatchObject({ I1: false, I2: false });
    expect(audited.examples).toContain(`item ${itemId}: quantity 3, live orders 4, distinct units 4, units missing or out of range 1`);
  } finally {
    await clients.pool.query('DELETE FROM orders WHERE id = ANY($1)', [broken]);
    await clients.pool.query(
      `ALTER TABLE orders ADD CONSTRAINT orders_live_unit_of_item CHECK (status NOT IN ('PENDING', 'PAID') OR coalesce(unit BETWEEN 1 AND item_quantity, false)) NOT VALID`,
    );
    await clients.pool.query('ALTER TABLE orders VALIDATE CONSTRAINT orders_live_unit_of_item');
  }
  expect(await unitChecks(sale.saleId)).toMatchObject({ I1: true, I2: true });

  // Unit 1, held by the first order, also listed free in Redis: it could be handed out twice.
  await clients.redis.rpush(keys.stock(itemId), '1');
  expect(await unitChecks(sale.saleId)).toMatchObject({ I1: true, I2: false });
  await clients.redis.lrem(keys.stock(itemId), -1, '1');
  expect(await unitChecks(sale.saleId)).toMatchObject({ I1: true, I2: true, held: true });

  // The two reservations name each other's unit: the totals per shard still agree, each order does not.
  const [first, second] = placed;
  const original = await clients.redis.hmget(keys.reservations, first.orderId, second.orderId);
  await clients.redis.hset(keys.reservations, first.orderId, reservationValue({ ...first, unit: second.unit }), second.orderId, reservationValue({ ...second, unit: first.unit }));
  const swapped = await unitChecks(sale.saleId);
  expect(swapped).toMatchObject({ I1: true, I2: true, held: false });
  expect(swapped.examples).toContain(`${first.orderId}: unit 1 of item ${itemId} on shard 0, reserved unit 2 of item ${itemId} on shard 0`);
  await clients.redis.hset(keys.reservations, first.orderId, original[0] as string, second.orderId, original[1] as string);
  expect(await unitChecks(sale.saleId)).toMatchObject({ I1: true, I2: true, held: true });
});
