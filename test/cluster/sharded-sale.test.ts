/**
 * A hot item's stock split over 3 shards on the 3 masters of the local Redis Cluster, through the real API,
 * worker, Temporal, Kafka and PostgreSQL (src/reservation/layout.ts; I1–I5 per shard): the race for 100 units,
 * buyers all homed on one shard, one buyer pressing two items at once, a release going back to its shard, and a
 * rebuild after every shard lost its keys. Every response is checked against openapi.yaml by the http() wrapper.
 */
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { homeShard, shardKeys, shardQuantity, shardUnits, type SaleLayout } from '../../src/reservation/layout';
import { repairClaims } from '../../src/reservation/claims';
import { claimMember, entryFields, parseReservation, reservationTerms } from '../../src/reservation/formats';
import { loadSale } from '../../src/sale/sales';
import { bounded, buyerToken, createTestSale, eventually, settledAudit, type Clients } from '../support/helpers';
import type { ApiReply, Http } from '../support/openapi';
import { useAppHarness, type AppHarness } from '../support/apiHarness';
import { clusterConfig, clusterNodesInfo, masterOf } from '../support/cluster';
import { sharedMasters } from '../../src/reservation/placement';
import { newOrderId } from '../../src/order/orderId';

// The race waits for its orders' payment windows to close and the audit to pass.
jest.setTimeout(120_000);

const run = randomUUID().slice(0, 8);
const config = clusterConfig();

const harness = useAppHarness(config, 'sharded-sale');
/** Every order accepted in this suite, terminated once it ends so no workflow outlives the suite's worker. */
const accepted = harness.accepted;
let clients: Clients;
let call: Http;
/** Calls to the API's internal door (admin). */
let internal: Http;
let temporal: AppHarness['temporal'];
beforeAll(() => ({ clients, call, internal, temporal } = harness));

const purchase = (itemId: number, token: string) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });

function statusCounts(replies: ApiReply[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const r of replies) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
}

async function tokens(buyers: string[]): Promise<{ buyer: string; token: string }[]> {
  return Promise.all(buyers.map(async (buyer) => ({ buyer, token: await buyerToken(config, buyer) })));
}

const names = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}-${run}-${i}`);

async function stockOf(saleId: number, itemId: number): Promise<(number | undefined)[]> {
  return (await clients.store.view.stockByShard(saleId, [itemId])).get(itemId) ?? [];
}

/** @returns per shard, its free units in ascending order (undefined where it is not loaded) */
async function freeUnitsOf(saleId: number, itemId: number): Promise<(number[] | undefined)[]> {
  return ((await clients.store.view.unitsByShard(saleId, [itemId])).get(itemId) ?? []).map((units) => units && [...units].sort((a, b) => a - b));
}

async function heldPerShard(saleId: number, shards: number): Promise<number[]> {
  const counts = new Array<number>(shards).fill(0);
  for (const r of await clients.store.view.reservations(saleId)) counts[r.stockShard ?? 0] += 1;
  return counts;
}

test('the shards of a 3-shard item sit on the 3 distinct masters of the cluster', async () => {
  const sale = await createTestSale(clients, { quantities: [30], stockShards: [3] });
  const layout = await clients.store.layouts.get(sale.saleId);
  const nodes = clusterNodesInfo();
  expect(layout.tags).toHaveLength(3);
  const owners = layout.tags.map((tag) => masterOf(tag, nodes));
  expect(new Set(owners).size).toBe(3);
  expect(owners.every((o) => o !== undefined)).toBe(true);
  expect(await sharedMasters(clients.store.redis, clients.store.layouts, sale.saleId)).toEqual([]);
});

test('1,000 buyers race for 100 units over 3 shards: 100 × 202, every shard emptied, all expire back to their shards, audit passes', async () => {
  const sale = await createTestSale(clients, { quantities: [100], stockShards: [3], paymentWindowMs: 4000 });
  const itemId = sale.items[0].itemId;
  const crowd = await tokens(names('race', 1000));

  const replies = await bounded(
    100,
    crowd.map(({ token }) => () => purchase(itemId, token)),
  );

  expect(statusCounts(replies)).toEqual({ 202: 100, 410: 900 });
  const winners = new Map<string, string>();
  replies.forEach((r, i) => r.status === 202 && winners.set(crowd[i].buyer, r.body.orderId as string));
  expect(new Set(winners.values()).size).toBe(100);
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 0, 0]);
  // Every shard gave exactly its part (34, 33, 33), and each winner is recorded once, on their home shard.
  expect(await heldPerShard(sale.saleId, 3)).toEqual([0, 1, 2].map((k) => shardQuantity(100, 3, k)));
  // ...each of its own units: every reservation holds a unit of its shard's run, and no unit is held twice.
  const held = await clients.store.view.reservations(sale.saleId);
  expect(held.filter((r) => !shardUnits(100, 3, r.stockShard ?? 0).includes(r.unit as number))).toEqual([]);
  expect(new Set(held.map((r) => r.unit)).size).toBe(100);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(winners);
  expect(await clients.store.view.claims(sale.saleId)).toEqual([]);

  // Nobody pays: each order expires and its unit goes back to the shard it came from.
  expect(await settledAudit(config, clients, temporal, sale.saleId, [...winners.values()])).toEqual([]);
  expect(await stockOf(sale.saleId, itemId)).toEqual([34, 33, 33]);
  expect(await freeUnitsOf(sale.saleId, itemId)).toEqual([0, 1, 2].map((k) => shardUnits(100, 3, k)));
});

test('buyers all homed on one shard still get every unit of the others; 410 only once all shards are empty', async () => {
  const sale = await createTestSale(clients, { quantities: [30], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const layout: SaleLayout = await clients.store.layouts.get(sale.saleId);
  const homedOnZero = names('home0', 400)
    .filter((buyer) => homeShard(layout, buyer) === 0)
    .slice(0, 60);
  expect(homedOnZero).toHaveLength(60);
  const crowd = await tokens(homedOnZero);

  const replies = await bounded(
    60,
    crowd.map(({ token }) => () => purchase(itemId, token)),
  );

  expect(statusCounts(replies)).toEqual({ 202: 30, 410: 30 });
  for (const r of replies) if (r.status === 202) accepted.push(r.body.orderId as string);
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 0, 0]);
  expect(await heldPerShard(sale.saleId, 3)).toEqual([10, 10, 10]);
  // Their entries all live on shard 0, the home shard, none elsewhere.
  expect(await clients.redis.hlen(shardKeys(layout.tags[0]).buyers)).toBe(30);
  expect(await clients.redis.hlen(shardKeys(layout.tags[1]).buyers)).toBe(0);
  expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
});

test('a buyer pressing two items, three times each, at once, gets one unit (I3 across items and shards)', async () => {
  const sale = await createTestSale(clients, { quantities: [6, 6], stockShards: [3, 3] });
  const [a, b] = sale.items.map((i) => i.itemId);
  const crowd = await tokens(names('both', 40));

  const presses = crowd.flatMap(({ buyer, token }) => [a, b, a, b, a, b].map((itemId) => ({ buyer, press: () => purchase(itemId, token) })));
  const replies = await Promise.all(presses.map((p) => p.press()));

  const wins = new Map<string, number>();
  replies.forEach((r, i) => r.status === 202 && wins.set(presses[i].buyer, (wins.get(presses[i].buyer) ?? 0) + 1));
  expect([...wins.values()].every((n) => n === 1)).toBe(true);
  expect(wins.size).toBe(12);
  expect(replies.every((r) => [202, 409, 410].includes(r.status))).toBe(true);
  for (const r of replies) if (r.status === 202) accepted.push(r.body.orderId as string);
  const buyers = await clients.store.view.buyers(sale.saleId);
  expect(new Set(buyers.keys())).toEqual(new Set(wins.keys()));
  expect(await stockOf(sale.saleId, a)).toEqual([0, 0, 0]);
  expect(await stockOf(sale.saleId, b)).toEqual([0, 0, 0]);
  expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
});

test('a unit taken from another shard than the buyer’s home goes back to that shard, and the buyer may buy again', async () => {
  const sale = await createTestSale(clients, { quantities: [3], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const layout = await clients.store.layouts.get(sale.saleId);
  const [first, second] = names('release', 200).filter((buyer) => homeShard(layout, buyer) === 0);
  const order = (userId: string) => ({ orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId, userId, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() });

  const one = order(first);
  expect(await clients.store.reserve(one)).toEqual({ kind: 'RESERVED', stockLeft: 0, stockShard: 0, unit: 1, stockEpoch: 1 });
  // Shard 0 is empty now: the second buyer is claimed on shard 0 and served by shard 1 (whose unit is 2).
  const two = order(second);
  expect(await clients.store.reserve(two)).toEqual({ kind: 'RESERVED', stockLeft: 0, stockShard: 1, unit: 2, stockEpoch: 1 });
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 0, 1]);
  // Run again for the same order (claim, take, settle, each resent), it answers the same and changes nothing.
  const snapshot = async () => ({
    stock: await stockOf(sale.saleId, itemId),
    buyers: await clients.store.view.buyers(sale.saleId),
    held: (await clients.store.view.reservations(sale.saleId)).map((r) => r.orderId).sort(),
    claims: await clients.store.view.claims(sale.saleId),
    queued: await Promise.all(layout.tags.map((tag) => clients.redis.xlen(shardKeys(tag).startQueue))),
  });
  const before = await snapshot();
  expect(await clients.store.reserve(two)).toEqual({ kind: 'RESERVED', stockLeft: 0, stockShard: 1, unit: 2, stockEpoch: 1 });
  expect(await snapshot()).toEqual(before);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(new Map([[first, one.orderId], [second, two.orderId]]));

  await clients.store.release({ ...two, stockShard: 1 });
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 1, 1]);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(new Map([[first, one.orderId]]));
  // Twice frees nothing more.
  await clients.store.release({ ...two, stockShard: 1 });
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 1, 1]);
  const again = order(second);
  expect(await clients.store.reserve(again)).toMatchObject({ kind: 'RESERVED' });
  await clients.store.release({ ...again, stockShard: (await clients.store.view.findReservation(sale.saleId, again.orderId))?.stockShard });
  await clients.store.release({ ...one, stockShard: 0 });
  expect(await stockOf(sale.saleId, itemId)).toEqual([1, 1, 1]);
  expect(await freeUnitsOf(sale.saleId, itemId)).toEqual([[1], [2], [3]]);
});

test('a claim left by a crash is repaired: undone when no shard holds its order, settled when one does', async () => {
  const sale = await createTestSale(clients, { quantities: [3], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const layout = await clients.store.layouts.get(sale.saleId);
  const [lost, kept] = names('crash', 200).filter((buyer) => homeShard(layout, buyer) === 2);
  const home = shardKeys(layout.tags[2]);
  const lostOrder = randomUUID();
  const keptOrder = randomUUID();
  // As an API process that died between claim.lua and its outcome would leave them, a minute ago.
  const leftBehind = async (userId: string, orderId: string) => {
    const member = claimMember({ orderId, itemId, userId });
    expect(await clients.redis.claim(home.buyers, home.claims, home.loaded, userId, orderId, member)).toEqual(['CLAIMED', expect.any(Number), expect.any(String)]);
    await clients.redis.zadd(home.claims, 'XX', Date.now() - 60_000, member);
  };
  await leftBehind(lost, lostOrder);
  await leftBehind(kept, keptOrder);
  const s1 = shardKeys(layout.tags[1]);
  const keptTerms = { orderId: keptOrder, saleId: sale.saleId, itemId, userId: kept, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() };
  // Its take landed before it died (within the claim's lease: taken as of now).
  const taken = await clients.redis.take(s1.stock(itemId), s1.reservations, s1.startQueue, s1.returns(itemId), s1.released, s1.loaded, s1.closed, keptOrder, reservationTerms(keptTerms), String(Date.now()), '15000', ...entryFields(keptTerms));
  expect(taken).toEqual(['RESERVED', 0, expect.any(String), 2, 1]);
  // A take whose claim time is not a number cannot check the lease: refused, nothing written.
  const lenBefore = await clients.redis.hlen(s1.reservations);
  await expect(
    clients.redis.take(s1.stock(itemId), s1.reservations, s1.startQueue, s1.returns(itemId), s1.released, s1.loaded, s1.closed, `${keptOrder}-x`, reservationTerms(keptTerms), 'undefined', '15000', ...entryFields(keptTerms)),
  ).rejects.toThrow(/BAD_ARGUMENTS/);
  expect(await clients.redis.hlen(s1.reservations)).toBe(lenBefore);

  expect(await repairClaims(clients.redis, clients.store.layouts, sale.saleId, 30_000)).toEqual({ settled: 1, undone: 1 });
  expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(new Map([[kept, keptOrder]]));
  // A fresh claim is left alone.
  await clients.redis.claim(home.buyers, home.claims, home.loaded, lost, lostOrder, claimMember({ orderId: lostOrder, itemId, userId: lost }));
  expect(await repairClaims(clients.redis, clients.store.layouts, sale.saleId, 30_000)).toEqual({ settled: 0, undone: 0 });
  await clients.redis.del(s1.startQueue);
});

test('a rebuild after every shard lost its keys restores stock = quantity − pending − paid per shard, buyers and reservations', async () => {
  const sale = await createTestSale(clients, { quantities: [30], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const crowd = await tokens(names('rebuild', 12));
  const replies = await Promise.all(crowd.map(({ token }) => purchase(itemId, token)));
  expect(statusCounts(replies)).toEqual({ 202: 12 });
  const orderIds = replies.map((r) => r.body.orderId as string);
  accepted.push(...orderIds);
  // Three are paid; the rest stay pending.
  for (const orderId of orderIds.slice(0, 3)) {
    expect(await clients.orders.pay(orderId, { paymentId: `pay-${orderId}`, amount: 1999 })).toMatchObject({ status: 'PAID' });
  }
  await eventually(async () => {
    const { rows } = await clients.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE sale_id = $1 AND status IN ('PENDING', 'PAID')`, [sale.saleId]);
    expect(rows[0].n).toBe(12);
  });
  const before = {
    stock: await stockOf(sale.saleId, itemId),
    free: await freeUnitsOf(sale.saleId, itemId),
    buyers: await clients.store.view.buyers(sale.saleId),
    held: await clients.store.view.reservations(sale.saleId),
  };

  const layout = await clients.store.layouts.get(sale.saleId);
  for (const tag of layout.tags) {
    const keys = shardKeys(tag);
    await clients.redis.del(keys.buyers, keys.reservations, keys.claims, keys.stock(itemId), keys.loaded);
  }
  expect(await stockOf(sale.saleId, itemId)).toEqual([undefined, undefined, undefined]);
  await loadSale(clients.pool, clients.store, sale.saleId, true);

  const { rows } = await clients.pool.query<{ shard: number; n: number }>(
    `SELECT stock_shard AS shard, count(*)::int AS n FROM orders WHERE sale_id = $1 AND status IN ('PENDING', 'PAID') GROUP BY 1`,
    [sale.saleId],
  );
  const live = [0, 1, 2].map((k) => rows.find((r) => r.shard === k)?.n ?? 0);
  expect(await stockOf(sale.saleId, itemId)).toEqual([0, 1, 2].map((k) => 10 - live[k]));
  expect(await stockOf(sale.saleId, itemId)).toEqual(before.stock);
  // The free units are those no live order holds, each on its own shard.
  expect(await freeUnitsOf(sale.saleId, itemId)).toEqual(before.free);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(before.buyers);
  const byOrder = (list: { orderId: string }[]) => [...list].sort((x, y) => x.orderId.localeCompare(y.orderId));
  // Each reservation as it was, in its shard's next epoch.
  expect(byOrder(await clients.store.view.reservations(sale.saleId))).toEqual(byOrder(before.held).map((o) => ({ ...o, stockEpoch: 2 })));
});

test('one shard lost its keys mid-sale: the rebuild refuses without force, restores only that shard with it, and the audit passes', async () => {
  const sale = await createTestSale(clients, { quantities: [30], stockShards: [3], paymentWindowMs: 8000 });
  const itemId = sale.items[0].itemId;
  const layout = await clients.store.layouts.get(sale.saleId);
  const crowd = await tokens(names('lost-shard', 24));
  const replies = await Promise.all(crowd.map(({ token }) => purchase(itemId, token)));
  expect(statusCounts(replies)).toEqual({ 202: 24 });
  const orderIds = replies.map((r) => r.body.orderId as string);
  await eventually(async () => {
    const { rows } = await clients.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE sale_id = $1 AND status = 'PENDING'`, [sale.saleId]);
    expect(rows[0].n).toBe(24);
  });
  const shardView = async (k: number) => {
    const keys = shardKeys(layout.tags[k]);
    return { stock: await clients.redis.lrange(keys.stock(itemId), 0, -1), buyers: await clients.redis.hgetall(keys.buyers), held: await clients.redis.hgetall(keys.reservations) };
  };
  const before = await Promise.all([0, 1, 2].map(shardView));
  expect(Object.keys(before[1].held).length).toBeGreaterThan(0);

  // Shard 1's master loses every key of the sale (no replica took over with them).
  const lost = shardKeys(layout.tags[1]);
  await clients.redis.del(lost.buyers, lost.reservations, lost.claims, lost.stock(itemId), lost.returns(itemId), lost.startQueue, lost.loaded, lost.released);
  const admin = config.ADMIN_TOKEN;
  // Until the rebuild nothing is written on the lost shard: a buyer homed there is answered 503, a release of a
  // unit it gave is refused (and tried again later by its activity), and a plain load, which would restore the
  // stock without the reservations, is refused.
  const homedThere = names('lost-shard-late', 200).find((buyer) => homeShard(layout, buyer) === 1) as string;
  expect((await purchase(itemId, await buyerToken(config, homedThere))).status).toBe(503);
  const [heldId, heldValue] = Object.entries(before[1].held)[0];
  await expect(clients.store.release(parseReservation(sale.saleId, 1, heldId, heldValue))).rejects.toThrow(/SHARD_NOT_LOADED/);
  expect(await internal('POST', `/api/admin/sales/${sale.saleId}/stock`, { token: admin })).toMatchObject({ status: 409, body: { error: 'REBUILD_NEEDED' } });
  const refused = await internal('POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=true`, { token: admin });
  expect(refused).toMatchObject({ status: 409, body: { error: 'REBUILD_REFUSED' } });
  expect(refused.body.details).toEqual([expect.stringContaining('shard(s) 1 lost their data, shard(s) 0, 2 kept theirs')]);
  expect(await shardView(1)).toEqual({ stock: [], buyers: {}, held: {} });
  expect(await clients.redis.exists(lost.loaded)).toBe(0);

  const rebuilt = await internal('POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=true&force=true`, { token: admin });
  expect(rebuilt.status).toBe(200);
  // The shards that kept their data are as they were; the lost one is back as PostgreSQL knows it, in its next
  // epoch (the last field of a reservation value).
  const epochOf = (view: { held: Record<string, string> }) => new Set(Object.values(view.held).map((value) => value.split('|').at(-1)));
  const withoutEpoch = <T extends { held: Record<string, string> }>(view: T): T => ({ ...view, held: Object.fromEntries(Object.entries(view.held).map(([id, value]) => [id, value.replace(/\|\d+$/, '')])) });
  const after = await Promise.all([0, 1, 2].map(shardView));
  expect(after.map(withoutEpoch)).toEqual(before.map(withoutEpoch));
  expect([after[0], after[2]]).toEqual([before[0], before[2]]);
  expect([epochOf(before[1]), epochOf(after[1])]).toEqual([new Set(['1']), new Set(['2'])]);

  // Nobody pays: every order expires, shard 1's included, and every unit is back on its shard.
  expect(await settledAudit(config, clients, temporal, sale.saleId, orderIds)).toEqual([]);
  expect(await stockOf(sale.saleId, itemId)).toEqual([10, 10, 10]);
});


test('a unit released onto a shard the buyer already found empty, while another shard stalls: RESERVED, never 410', async () => {
  const sale = await createTestSale(clients, { quantities: [3], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const layout = await clients.store.layouts.get(sale.saleId);
  const homedOn = (k: number, prefix: string) => names(prefix, 200).find((buyer) => homeShard(layout, buyer) === k) as string;
  const order = (userId: string) => ({ orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId, userId, priceMinor: 1999, paymentWindowMs: 600_000, reservedAtMs: Date.now() });
  // One holder per shard takes that shard's one unit: the item is sold out.
  const holders = [0, 1, 2].map((k) => order(homedOn(k, 'race-holder')));
  for (const [k, holder] of holders.entries()) expect(await clients.store.reserve(holder)).toMatchObject({ kind: 'RESERVED', stockShard: k });

  // A buyer homed on shard 0 finds shard 1 empty, then waits on shard 2, whose master is paused for 1 s; meanwhile
  // shard 1's holder releases its unit onto the shard the buyer already looked at.
  const buyer = order(homedOn(0, 'race-buyer'));
  const [host, port] = (masterOf(layout.tags[2]) as string).split(':');
  const pauser = new Redis({ host, port: Number(port) });
  try {
    await pauser.client('PAUSE', 1000, 'WRITE');
    const pressing = clients.store.reserve(buyer);
    await new Promise((r) => setTimeout(r, 300));
    await clients.store.release({ ...holders[1], stockShard: 1 });
    // The unit shard 1's holder gave back: unit 2.
    expect(await pressing).toEqual({ kind: 'RESERVED', stockLeft: 0, stockShard: 1, unit: 2, stockEpoch: 1 });
  } finally {
    pauser.disconnect();
  }
  await clients.store.release({ ...holders[0], stockShard: 0 });
  await clients.store.release({ ...holders[2], stockShard: 2 });
  await clients.store.release({ ...buyer, stockShard: 1 });
  expect(await stockOf(sale.saleId, itemId)).toEqual([1, 1, 1]);
  expect(await clients.store.view.buyers(sale.saleId)).toEqual(new Map());
});
