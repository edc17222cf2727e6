/**
 * Purchase under contention, over HTTP against the real API, Redis, Temporal and PostgreSQL (I1, I2, I3):
 * 1,000 buyers for 100 units, the same crowd again (the in-memory sold-out answer, and Redis' own), one buyer
 * hammering, the last unit, an item with no stock, and the EVALSHA → EVAL fallback after SCRIPT FLUSH.
 * Every response is checked against openapi.yaml by the http() wrapper.
 */
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { newOrderId } from '../../src/order/orderId';
import { saleKeys } from '../../src/reservation/layout';
import { bounded, buyerToken, eventually, createTestSale, testConfig, type Clients } from '../support/helpers';
import type { ApiReply, Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const run = randomUUID().slice(0, 8);
const config = testConfig();

const harness = useAppHarness(config, 'purchase-race');
/** Every order accepted in this suite, terminated once it ends so no workflow outlives the suite's worker. */
const accepted = harness.accepted;
let clients: Clients;
let call: Http;
beforeAll(() => ({ clients, call } = harness));

function statusCounts(replies: ApiReply[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const r of replies) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
}

function purchasePath(itemId: number): string {
  return `/api/flash-sales/items/${itemId}/purchase`;
}

/** Samples the item's Redis stock in a loop until stopped; @returns every value seen */
function watchStock(saleId: number, itemId: number) {
  const seen: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const value = (await clients.store.view.stock(saleId, [itemId])).get(itemId);
      if (value !== undefined) seen.push(value);
      await new Promise((r) => setImmediate(r));
    }
  })();
  return async () => {
    running = false;
    await loop;
    return seen;
  };
}

async function stockOf(saleId: number, itemId: number): Promise<number | undefined> {
  return (await clients.store.view.stock(saleId, [itemId])).get(itemId);
}

async function tokensFor(prefix: string, count: number): Promise<{ buyer: string; token: string }[]> {
  return Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const buyer = `${prefix}-${run}-${i}`;
      return { buyer, token: await buyerToken(config, buyer) };
    }),
  );
}

async function crowd(target: Http, itemId: number, buyers: { token: string }[]): Promise<ApiReply[]> {
  return bounded(
    100,
    buyers.map(({ token }) => () => target('POST', purchasePath(itemId), { token })),
  );
}

/** Checks one race of 1,000 buyers for 100 units; @returns each winner's orderId by buyer */
async function raceForHundred(target: Http, prefix: string) {
  const sale = await createTestSale(clients, { quantities: [100] });
  const itemId = sale.items[0].itemId;
  const buyers = await tokensFor(prefix, 1000);

  const stopWatching = watchStock(sale.saleId, itemId);
  const replies = await crowd(target, itemId, buyers);
  const seen = await stopWatching();

  expect(statusCounts(replies)).toEqual({ 202: 100, 410: 900 });
  const winners = new Map<string, string>();
  replies.forEach((r, i) => {
    if (r.status === 202) winners.set(buyers[i].buyer, r.body.orderId as string);
    else expect(r.body).toEqual({ error: 'SOLD_OUT' });
  });
  accepted.push(...winners.values());
  expect(new Set(winners.values()).size).toBe(100);

  expect(await stockOf(sale.saleId, itemId)).toBe(0);
  expect(seen.length).toBeGreaterThan(0);
  expect(Math.min(...seen)).toBeGreaterThanOrEqual(0);
  // I2: stock + reservations = quantity; I3: each winner holds exactly their own order.
  const keys = saleKeys(sale.saleId);
  expect(await clients.redis.hgetall(keys.buyers)).toEqual(Object.fromEntries(winners));
  const reservations = await clients.store.view.reservations(sale.saleId);
  expect(new Map(reservations.map((r) => [r.userId, r.orderId]))).toEqual(winners);
  expect(reservations.every((r) => r.itemId === itemId)).toBe(true);
  // I1: each winner holds its own unit, and together they hold units 1..100.
  expect(reservations.map((r) => r.unit).sort((a, b) => (a as number) - (b as number))).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
  return { sale, itemId, buyers, winners };
}

describe('1,000 distinct buyers race for 100 units', () => {
  test('the sold-out answer from memory: 100 × 202, 900 × 410, then the same crowd gets only 410', async () => {
    const { sale, itemId, buyers } = await raceForHundred(call, 'race-on');

    const again = await crowd(call, itemId, buyers);
    // With the in-memory flag on, the flag answers before Redis' one-per-buyer check: the 100 winners asking
    // again hear 410 SOLD_OUT, not 409 ALREADY_PURCHASED. No 202 either way.
    expect(statusCounts(again)).toEqual({ 410: 1000 });
    expect(again.every((r) => r.body.error === 'SOLD_OUT')).toBe(true);
    expect(await stockOf(sale.saleId, itemId)).toBe(0);
    expect(await clients.redis.hlen(saleKeys(sale.saleId).reservations)).toBe(100);

    // I1 in PostgreSQL once the workflows have persisted their orders: live orders = quantity, each holding its
    // own unit of 1..quantity.
    await eventually(async () => {
      const { rows } = await clients.pool.query<{ live: number; units: number; first: number; last: number }>(
        `SELECT count(*)::int AS live, count(DISTINCT unit)::int AS units, min(unit) AS first, max(unit) AS last
         FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`,
        [itemId],
      );
      expect(rows[0]).toEqual({ live: 100, units: 100, first: 1, last: 100 });
    });
  });

  test("Redis' own answer to the same crowd, under the sold-out flag: each winner ALREADY_PURCHASED with their own orderId, 900 × SOLD_OUT", async () => {
    const { sale, itemId, buyers, winners } = await raceForHundred(call, 'race-redis');
    const again = await bounded(
      100,
      buyers.map(({ buyer }) => () => clients.store.reserve({ orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId, userId: buyer, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() })),
    );
    again.forEach((outcome, i) => {
      const own = winners.get(buyers[i].buyer);
      expect(outcome).toEqual(own ? { kind: 'ALREADY_PURCHASED', orderId: own } : { kind: 'SOLD_OUT' });
    });
    expect(await stockOf(sale.saleId, itemId)).toBe(0);
  });
});

test('one buyer, 50 parallel requests, stock 10: exactly one 202 and 49 × 409 naming that order; stock 9', async () => {
  const sale = await createTestSale(clients, { quantities: [10] });
  const itemId = sale.items[0].itemId;
  const token = await buyerToken(config, `hammer-${run}`);
  const replies = await Promise.all(Array.from({ length: 50 }, () => call('POST', purchasePath(itemId), { token })));

  expect(statusCounts(replies)).toEqual({ 202: 1, 409: 49 });
  const orderId = replies.find((r) => r.status === 202)?.body.orderId as string;
  accepted.push(orderId);
  for (const r of replies.filter((r) => r.status === 409)) expect(r.body).toEqual({ error: 'ALREADY_PURCHASED', orderId });
  expect(await stockOf(sale.saleId, itemId)).toBe(9);
  expect(await clients.redis.hgetall(saleKeys(sale.saleId).reservations)).toEqual({
    // The one order holds unit 1, the head of the free units.
    [orderId]: expect.stringMatching(new RegExp(`^${itemId}\\|hammer-${run}\\|\\d+\\|\\d+\\|\\d+\\|1\\|1$`)),
  });
});

test('the last unit, two buyers at once: one 202 and one 410', async () => {
  const sale = await createTestSale(clients, { quantities: [1] });
  const itemId = sale.items[0].itemId;
  const [a, b] = await tokensFor('last-unit', 2);
  const replies = await Promise.all([a, b].map(({ token }) => call('POST', purchasePath(itemId), { token })));

  expect(replies.map((r) => r.status).sort()).toEqual([202, 410]);
  accepted.push(replies.find((r) => r.status === 202)?.body.orderId as string);
  expect(replies.find((r) => r.status === 410)?.body).toEqual({ error: 'SOLD_OUT' });
  expect(await stockOf(sale.saleId, itemId)).toBe(0);
  expect(await clients.redis.hlen(saleKeys(sale.saleId).reservations)).toBe(1);
});

test('an item with quantity 0: 410, stock stays 0 and no reservation is recorded', async () => {
  const sale = await createTestSale(clients, { quantities: [0] });
  const itemId = sale.items[0].itemId;
  const [buyer] = await tokensFor('nothing-left', 1);
  const reply = await call('POST', purchasePath(itemId), { token: buyer.token });

  expect(reply.status).toBe(410);
  expect(reply.body).toEqual({ error: 'SOLD_OUT' });
  expect(await stockOf(sale.saleId, itemId)).toBe(0);
  const keys = saleKeys(sale.saleId);
  expect(await clients.redis.exists(keys.buyers, keys.reservations)).toBe(0);
});

test('after SCRIPT FLUSH, reserve falls back from EVALSHA to EVAL and a purchase still succeeds', async () => {
  const sale = await createTestSale(clients, { quantities: [5] });
  const itemId = sale.items[0].itemId;
  const sha = createHash('sha1')
    .update(readFileSync(join(__dirname, '..', '..', 'lua', 'reserve.lua'), 'utf8'))
    .digest('hex');
  // Make sure the script is cached first (a purchase through the API), then flush the cache.
  const [first, second] = await tokensFor('flush', 2);
  const before = await call('POST', purchasePath(itemId), { token: first.token });
  expect(before.status).toBe(202);
  accepted.push(before.body.orderId as string);
  expect(await clients.redis.script('EXISTS', sha)).toEqual([1]);
  await clients.redis.script('FLUSH');
  expect(await clients.redis.script('EXISTS', sha)).toEqual([0]);

  const after = await call('POST', purchasePath(itemId), { token: second.token });
  expect(after.status).toBe(202);
  accepted.push(after.body.orderId as string);
  expect(await stockOf(sale.saleId, itemId)).toBe(3);
  // The fallback EVAL put the script back in the cache.
  expect(await clients.redis.script('EXISTS', sha)).toEqual([1]);
});
