/**
 * Redis converges to PostgreSQL (docs/design.md, "The reconciler"), on the real stores, Temporal and Kafka, with the
 * API's own starter and reconciler at their default settings. Each test writes back into Redis what a replica that
 * missed some writes holds (as a failover to it would leave the shard), or makes a release fail, and shows the
 * product bring the gate back in line with the truth by itself within seconds: no unit lost, no buyer locked out;
 * each ends with the audit at rest. Also: a refund queued for a payment id that then paid the order is dropped.
 * The repair latencies here are single samples; `npm run bench -- reconcile` measures their spread.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { shardKeys, tagOf } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { paidSignal } from '../../src/workflows/definitions';
import { useAppHarness } from '../support/apiHarness';
import { buyerToken, createTestSale, orderResult, orderRow, settledAudit, testConfig, until } from '../support/helpers';
import { openEventTap, type EventTap } from '../support/kafka';

const PRICE = 1200;
const config = testConfig();
const app = useAppHarness(config, 'converge');
const run = randomUUID().slice(0, 8);
const services = (...args: string[]) => execFileSync('bash', [join(__dirname, '..', '..', 'scripts', 'services.sh'), ...args], { stdio: 'ignore' });
let tap: EventTap;

beforeAll(async () => {
  tap = await openEventTap(config);
});
afterAll(async () => {
  await tap?.close();
});

const token = (buyer: string) => buyerToken(config, `${buyer}-${run}`);
const press = async (sale: Sale, buyer: string) => app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await token(buyer) });
const orderOf = async (orderId: string, buyer: string) => app.call('GET', `/api/flash-sales/orders/${orderId}`, { token: await token(buyer) });

async function keysOf(sale: Sale) {
  return shardKeys(tagOf(await app.clients.store.layouts.get(sale.saleId), 0));
}

/** @returns ms from `since` until check holds (polled every 50 ms, for at most 15 s; a check that throws does not hold) */
async function msUntil(since: number, what: string, check: () => Promise<boolean>): Promise<number> {
  await until(what, () => check().catch(() => false), 15_000);
  return Date.now() - since;
}

test('a release a failover lost (the promoted replica still holds the EXPIRED order\'s reservation and entry, not its unit): repaired within seconds; GET says EXPIRED, the buyer buys again', async () => {
  const sale = await createTestSale(app.clients, { quantities: [2], priceMinor: PRICE, paymentWindowMs: 1500 });
  const keys = await keysOf(sale);
  const itemId = sale.items[0].itemId;
  const first = await press(sale, 'lost-release');
  expect(first.status).toBe(202);
  const orderId = first.body.orderId as string;
  const value = await app.clients.redis.hget(keys.reservations, orderId);
  expect(await orderResult(app.temporal, orderId)).toMatchObject({ status: 'EXPIRED' });
  const unit = (value as string).split('|')[5];
  expect(await app.clients.redis.lrange(keys.stock(itemId), 0, -1)).toContain(unit);

  // What a replica that missed the release holds: the reservation, the entry, no unit back, no released mark.
  await app.clients.redis.multi().hset(keys.reservations, orderId, value as string).hset(keys.buyers, `lost-release-${run}`, orderId).lrem(keys.stock(itemId), 0, unit).hdel(keys.released, orderId).decr(keys.returns(itemId)).exec();
  const wroteBack = Date.now();
  expect((await orderOf(orderId, 'lost-release')).body.status).toBe('PENDING');
  const repairedMs = await msUntil(wroteBack, 'the release repaired', async () => (await orderOf(orderId, 'lost-release')).body.status === 'EXPIRED');
  expect(await app.clients.redis.hget(keys.reservations, orderId)).toBeNull();
  expect(await app.clients.redis.lrange(keys.stock(itemId), 0, -1)).toContain(unit);
  expect(repairedMs).toBeLessThan(5000);
  const again = await press(sale, 'lost-release');
  expect(again.status).toBe(202);
  expect(await orderResult(app.temporal, again.body.orderId as string)).toMatchObject({ status: 'EXPIRED' });
  expect(await settledAudit(config, app.clients, app.temporal, sale.saleId, [orderId, again.body.orderId as string])).toEqual([]);
}, 90_000);

test('a reservation a restart lost after the order was stored (no reservation, no entry, its unit free again): restored by the full pass the new master brings; the buyer is told 409 naming it, no unit is handed out twice', async () => {
  const sale = await createTestSale(app.clients, { quantities: [3], priceMinor: PRICE, paymentWindowMs: 20_000 });
  const keys = await keysOf(sale);
  const itemId = sale.items[0].itemId;
  const first = await press(sale, 'lost-reservation');
  const orderId = first.body.orderId as string;
  const value = (await app.clients.redis.hget(keys.reservations, orderId)) as string;
  const unit = value.split('|')[5];
  await until('the order stored', async () => (await orderRow(app.clients.pool, orderId))?.status === 'PENDING');
  // Past the incremental passes' look-back at the order's last change: only a full pass can see this loss.
  await new Promise((r) => setTimeout(r, 6000));

  // What the node holds when it comes back without the reservation's writes (appendfsync everysec, or a replica
  // that missed them promoted): a new run id, whose sales the reconciler passes over in full at once.
  await app.clients.redis.multi().hdel(keys.reservations, orderId).hdel(keys.buyers, `lost-reservation-${run}`).lpush(keys.stock(itemId), unit).exec();
  services('stop', 'redis');
  services('up');
  const wroteBack = Date.now();
  const repairedMs = await msUntil(wroteBack, 'the reservation restored', async () => (await app.clients.redis.hget(keys.reservations, orderId)) !== null);
  expect(await app.clients.redis.hget(keys.buyers, `lost-reservation-${run}`)).toBe(orderId);
  expect(await app.clients.redis.lrange(keys.stock(itemId), 0, -1)).not.toContain(unit);
  expect(repairedMs).toBeLessThan(5000);

  expect(await press(sale, 'lost-reservation')).toMatchObject({ status: 409, body: { error: 'ALREADY_PURCHASED', orderId } });
  const others = [await press(sale, 'other-1'), await press(sale, 'other-2')];
  expect(others.map((o) => o.status)).toEqual([202, 202]);
  expect((await press(sale, 'other-3')).status).toBe(410);
  const ids = [orderId, ...others.map((o) => o.body.orderId as string)];
  for (const id of ids) expect(await orderResult(app.temporal, id)).toMatchObject({ status: 'EXPIRED' });
  expect(await settledAudit(config, app.clients, app.temporal, sale.saleId, ids)).toEqual([]);
}, 120_000);

test('a cancel whose release fails answers 503 RELEASE_PENDING, not 200 with the buyer locked out; once the shard answers, the unit comes back by itself and the buyer buys again', async () => {
  const sale = await createTestSale(app.clients, { quantities: [1], priceMinor: PRICE, paymentWindowMs: 30_000 });
  const keys = await keysOf(sale);
  const first = await press(sale, 'cancel-fails');
  const orderId = first.body.orderId as string;
  await until('the order stored', async () => (await orderRow(app.clients.pool, orderId))?.status === 'PENDING');
  // The shard refuses every release while its loaded mark is away (SHARD_NOT_LOADED), as a node answering errors would.
  const epoch = (await app.clients.redis.get(keys.loaded)) as string;
  await app.clients.redis.del(keys.loaded);
  try {
    const cancelled = await app.call('POST', `/api/flash-sales/orders/${orderId}/cancel`, { token: await token('cancel-fails') });
    expect(cancelled).toMatchObject({ status: 503, body: { error: 'RELEASE_PENDING', orderId, status: 'CANCELLED', reason: 'BUYER' } });
    expect(cancelled.headers.get('retry-after')).toBe('1');
    expect(await orderRow(app.clients.pool, orderId)).toMatchObject({ status: 'CANCELLED' });
  } finally {
    await app.clients.redis.set(keys.loaded, epoch);
  }
  const back = Date.now();
  const freeMs = await msUntil(back, 'the buyer free again', async () => (await orderOf(orderId, 'cancel-fails')).body.status === 'CANCELLED');
  expect(freeMs).toBeLessThan(5000);
  expect((await app.call('POST', `/api/flash-sales/orders/${orderId}/cancel`, { token: await token('cancel-fails') })).status).toBe(200);
  const again = await press(sale, 'cancel-fails');
  expect(again.status).toBe(202);
  await app.call('POST', `/api/flash-sales/orders/${again.body.orderId}/cancel`, { token: await token('cancel-fails') });
  expect(await settledAudit(config, app.clients, app.temporal, sale.saleId, [orderId, again.body.orderId as string])).toEqual([]);
}, 90_000);

test('a `paid` signal refused for its amount, then the same payment id through the route: PAID, and no refund is published for the payment that paid', async () => {
  const sale = await createTestSale(app.clients, { quantities: [1], priceMinor: PRICE, paymentWindowMs: 20_000 });
  const first = await press(sale, 'refund');
  const orderId = first.body.orderId as string;
  await until('the order stored', async () => (await orderRow(app.clients.pool, orderId))?.status === 'PENDING');
  const handle = app.temporal.workflow.getHandle(orderId);
  await until('the workflow started', async () => handle.describe().then(() => true, () => false));
  const paymentId = `pay-${orderId}`;
  await handle.signal(paidSignal, { paymentId, amount: PRICE + 1 });
  await until('the signal decided (a local activity after it in the history)', async () => {
    const events = (await handle.fetchHistory()).events ?? [];
    const signalled = events.findIndex((e) => e.workflowExecutionSignaledEventAttributes);
    return signalled >= 0 && events.slice(signalled).some((e) => e.markerRecordedEventAttributes);
  });
  const paid = await app.internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId, amount: PRICE } });
  expect(paid).toMatchObject({ status: 200, body: { status: 'PAID' } });
  expect(await orderResult(app.temporal, orderId)).toMatchObject({ status: 'PAID', paymentId });
  const events = await tap.collect([orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') });
  expect(events.filter((e) => e.paymentId === paymentId).map((e) => e.type)).toEqual(['OrderPaid']);
  expect(await settledAudit(config, app.clients, app.temporal, sale.saleId, [orderId])).toEqual([]);
}, 90_000);
