/**
 * The edge of the purchase route, as deployed (gate and rate limits on): a purchase before the start, or
 * without its sale's gate value, is 403; a flood of one buyer or one client IP is 429 with Retry-After past its
 * limit; the sold-out answer stands ahead of the limits. Each refusal changes nothing in Redis (stock, buyers,
 * reservations, start queue), PostgreSQL (orders, sold), Temporal (the sale's workflows) or Kafka (the sale's
 * events). TRUST_PROXY is 1 (one proxy in front), so each test sends its own client IP in X-Forwarded-For and has a budget of its own.
 */
import { randomUUID } from 'node:crypto';
import { SaleGates } from '../../src/api/saleGate';
import { saleKeys } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { buyerToken, createTestSale, eventually, testConfig } from '../support/helpers';
import { openEventTap, type EventTap } from '../support/kafka';
import { useAppHarness } from '../support/apiHarness';

const PER_BUYER = 5;
const PER_IP = 12;
const config = testConfig({
  SALE_GATE_REQUIRED: 'true',
  RATE_LIMIT_PER_BUYER: String(PER_BUYER),
  RATE_LIMIT_PER_IP: String(PER_IP),
  RATE_LIMIT_READS_PER_IP: '100',
  // One window for the whole suite: no count starts afresh in the middle of a flood.
  RATE_LIMIT_WINDOW_S: '300',
  TRUST_PROXY: '1',
});
const app = useAppHarness(config, 'edge');
const gates = new SaleGates(config.SALE_GATE_SECRET);
let tap: EventTap;
let ipSeq = 0;
beforeAll(async () => {
  tap = await openEventTap(config);
});
afterAll(async () => {
  await tap?.close();
});

/** A client IP no other test has used. */
const freshIp = () => `10.7.${Math.floor(++ipSeq / 250)}.${(ipSeq % 250) + 1}`;

/** Everything a purchase could change for one sale, in the four stores. */
async function snapshot(sale: Sale) {
  const { clients, temporal } = app;
  const keys = saleKeys(sale.saleId);
  const units = await clients.store.view.unitsByShard(
    sale.saleId,
    sale.items.map((i) => i.itemId),
  );
  // sold: the sale's live orders, each holding one unit.
  const orders = await clients.pool.query<{ n: number; sold: number }>(
    `SELECT count(*)::int AS n, (count(*) FILTER (WHERE status IN ('PENDING', 'PAID')))::int AS sold FROM orders WHERE sale_id = $1`,
    [sale.saleId],
  );
  return {
    stock: Object.fromEntries(units),
    buyers: await clients.redis.hgetall(keys.buyers),
    reservations: await clients.redis.hgetall(keys.reservations),
    queued: await clients.redis.xlen(keys.startQueue),
    orders: orders.rows[0],
    workflows: (await temporal.workflow.count(`SaleId = ${sale.saleId}`)).count,
    events: (await tap.collectWhere((e) => e.saleId === sale.saleId, { timeoutMs: 2000 })).length,
  };
}

async function purchase(sale: Sale, ip: string, options: { buyer?: string; gate?: string | null } = {}) {
  const headers: Record<string, string> = { 'x-forwarded-for': ip };
  const gate = options.gate === undefined ? gates.of(sale.saleId) : options.gate;
  if (gate !== null) headers['sale-gate'] = gate;
  const reply = await app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, {
    token: await buyerToken(config, options.buyer ?? `edge-${randomUUID()}`),
    headers,
  });
  if (reply.status === 202) app.accepted.push(reply.body.orderId as string);
  return reply;
}

test('before the start: 403 SALE_NOT_ACTIVE with or without the gate value; the view has no gate yet', async () => {
  const sale = await createTestSale(app.clients, { quantities: [5], startsInMs: 600_000 });
  const before = await snapshot(sale);
  for (const gate of [null, gates.of(sale.saleId), 'x'.repeat(22)]) {
    const reply = await purchase(sale, freshIp(), { gate });
    expect(reply).toMatchObject({ status: 403, body: { error: 'SALE_NOT_ACTIVE' } });
  }
  const view = await app.call('GET', `/api/flash-sales/sales/${sale.saleId}`);
  expect(view.status).toBe(200);
  expect(view.body.gate).toBeUndefined();
  expect(await snapshot(sale)).toEqual(before);
});

test('once on: a missing, wrong or other sale’s gate → 403 SALE_GATE_INVALID; the view’s gate → 202', async () => {
  const sale = await createTestSale(app.clients, { quantities: [5] });
  const other = await createTestSale(app.clients, { quantities: [5] });
  const before = await snapshot(sale);
  for (const gate of [null, '', gates.of(sale.saleId).slice(0, 21), gates.of(other.saleId), new SaleGates('another-secret-of-at-least-32-characters').of(sale.saleId)]) {
    const reply = await purchase(sale, freshIp(), { gate });
    expect(reply).toMatchObject({ status: 403, body: { error: 'SALE_GATE_INVALID' } });
  }
  expect(await snapshot(sale)).toEqual(before);

  const view = await app.call('GET', `/api/flash-sales/sales/${sale.saleId}`);
  expect(view.body.gate).toBe(gates.of(sale.saleId));
  const reply = await purchase(sale, freshIp(), { gate: view.body.gate as string });
  expect(reply.status).toBe(202);
});

test(`a flood of one buyer: past ${PER_BUYER} requests, 429 RATE_LIMITED with Retry-After on purchase and GET order, nothing changed`, async () => {
  const sale = await createTestSale(app.clients, { quantities: [50] });
  const buyer = `flood-${randomUUID()}`;
  const first = await purchase(sale, freshIp(), { buyer });
  expect(first.status).toBe(202);
  await eventually(async () => expect(await snapshot(sale)).toMatchObject({ events: 1, workflows: 1, queued: 0 }));
  const before = await snapshot(sale);

  const replies = await Promise.all(Array.from({ length: 20 }, () => purchase(sale, freshIp(), { buyer })));
  const statuses = replies.map((r) => r.status).sort();
  expect(statuses).toEqual([...Array<number>(PER_BUYER - 1).fill(409), ...Array<number>(20 - PER_BUYER + 1).fill(429)]);
  for (const r of replies.filter((r) => r.status === 429)) {
    expect(r.body).toEqual({ error: 'RATE_LIMITED' });
    const wait = Number(r.headers.get('retry-after'));
    expect(wait).toBeGreaterThanOrEqual(1);
    expect(wait).toBeLessThanOrEqual(300);
  }
  const order = await app.call('GET', `/api/flash-sales/orders/${first.body.orderId as string}`, {
    token: await buyerToken(config, buyer),
    headers: { 'x-forwarded-for': freshIp() },
  });
  expect(order.status).toBe(429);
  expect(await snapshot(sale)).toEqual(before);
});

test(`a flood of one client IP: past ${PER_IP} requests 429, before the token is checked; other IPs go on`, async () => {
  const sale = await createTestSale(app.clients, { quantities: [50] });
  const ip = freshIp();
  const admitted = await Promise.all(Array.from({ length: PER_IP - 2 }, () => purchase(sale, ip)));
  expect(admitted.map((r) => r.status)).toEqual(Array<number>(PER_IP - 2).fill(202));
  const forged = await Promise.all(
    Array.from({ length: 4 }, () => app.call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: 'not.a.token', headers: { 'x-forwarded-for': ip } })),
  );
  expect(forged.map((r) => r.status).sort()).toEqual([401, 401, 429, 429]);
  await eventually(async () => expect(await snapshot(sale)).toMatchObject({ events: PER_IP - 2, workflows: PER_IP - 2, queued: 0 }));
  const before = await snapshot(sale);

  const flood = await Promise.all(Array.from({ length: 10 }, () => purchase(sale, ip)));
  expect(flood.map((r) => r.status)).toEqual(Array<number>(10).fill(429));
  // Only the hop our proxy appended counts: entries the client wrote before it change nothing.
  const spoofed = await purchase(sale, `${freshIp()}, ${ip}`);
  expect(spoofed.status).toBe(429);
  expect(await snapshot(sale)).toEqual(before);
  await expect(purchase(sale, freshIp())).resolves.toMatchObject({ status: 202 });
});

test('the sold-out answer stands ahead of the limits: one IP past its limit still hears 410 on a sold-out item', async () => {
  const sale = await createTestSale(app.clients, { quantities: [1] });
  const ip = freshIp();
  await expect(purchase(sale, ip)).resolves.toMatchObject({ status: 202 });
  const replies = await Promise.all(Array.from({ length: PER_IP * 2 }, () => purchase(sale, ip)));
  expect(new Set(replies.map((r) => r.status))).toEqual(new Set([410]));
});
