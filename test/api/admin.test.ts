/**
 * Admin routes with the ADMIN_TOKEN: create a sale (stock loaded in Redis), refuse bad bodies and other
 * credentials, load stock idempotently, and rebuild Redis' view of a sale from PostgreSQL after its keys
 * were lost (stock = quantity − pending − paid, live buyers and reservations back). A worker runs the order
 * workflows so that PostgreSQL holds the orders a rebuild reads. Every response is checked against openapi.yaml.
 */
import { randomUUID } from 'node:crypto';
import { saleKeys } from '../../src/reservation/layout';
import { buyerToken, eventually, testConfig, unload, type Clients } from '../support/helpers';
import type { ApiBody, Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const config = testConfig();
const app = useAppHarness(config, 'admin');
const { accepted } = app;
let clients: Clients;
let call: Http;
let internal: Http;
beforeAll(() => ({ clients, call, internal } = app));
const run = randomUUID().slice(0, 8);
const admin = config.ADMIN_TOKEN;



function saleInput(name: string, quantities: number[]) {
  const now = Date.now();
  return {
    name,
    startsAt: new Date(now - 60_000).toISOString(),
    endsAt: new Date(now + 3_600_000).toISOString(),
    paymentWindowMs: 600_000,
    items: quantities.map((quantity, i) => ({ productId: `sku-${i}`, quantity, priceMinor: 2500, currency: 'EUR' })),
  };
}

async function createSale(quantities: number[]): Promise<ApiBody & { saleId: number; items: NonNullable<ApiBody['items']> }> {
  const reply = await internal('POST', '/api/admin/sales', { token: admin, json: saleInput(`admin-${run}-${randomUUID()}`, quantities) });
  expect(reply.status).toBe(201);
  return reply.body as ApiBody & { saleId: number; items: NonNullable<ApiBody['items']> };
}

async function salesNamed(name: string): Promise<number> {
  const { rows } = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM sale_events WHERE name = $1', [name]);
  return rows[0].n;
}

async function purchase(itemId: number, buyer: string) {
  return call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(config, buyer) });
}

test('POST /api/admin/sales → 201 with item ids, and every item’s stock is loaded in Redis', async () => {
  const name = `admin-create-${run}`;
  const reply = await internal('POST', '/api/admin/sales', { token: admin, json: saleInput(name, [7, 0, 3]) });
  expect(reply.status).toBe(201);
  expect(reply.body).toMatchObject({ name, paymentWindowMs: 600_000 });
  const { saleId, items } = reply.body as { saleId: number; items: NonNullable<ApiBody['items']> };
  expect(items.map((i) => [i.productId, i.quantity, i.sold, i.stock])).toEqual([
    ['sku-0', 7, 0, 7],
    ['sku-1', 0, 0, 0],
    ['sku-2', 3, 0, 3],
  ]);
  const stock = await clients.store.view.stock(
    saleId,
    items.map((i) => i.itemId),
  );
  expect([...stock.values()]).toEqual([7, 0, 3]);
  expect(await salesNamed(name)).toBe(1);

  const read = await internal('GET', `/api/admin/sales/${saleId}`, { token: admin });
  expect(read.status).toBe(200);
  expect(read.body.items?.map((i) => i.stock)).toEqual([7, 0, 3]);
});

describe('POST /api/admin/sales with a bad body → 400 INVALID_BODY (shape) or 422 INVALID_SALE (a rule between fields), no sale created', () => {
  const good = () => saleInput(`admin-bad-${run}-${randomUUID()}`, [5]);
  test.each<[string, () => Record<string, unknown>, number, string]>([
    ['no items', () => ({ ...good(), items: [] }), 400, 'INVALID_BODY'],
    ['items missing', () => ({ ...good(), items: undefined }), 400, 'INVALID_BODY'],
    ['endsAt before startsAt', () => ({ ...good(), endsAt: new Date(Date.now() - 3_600_000).toISOString() }), 422, 'INVALID_SALE'],
    ['startsAt not a date', () => ({ ...good(), startsAt: 'tomorrow' }), 400, 'INVALID_BODY'],
    ['endsAt in year 10000 once in UTC', () => ({ ...good(), endsAt: '9999-12-31T23:00:00-02:00' }), 422, 'INVALID_SALE'],
    ['negative quantity', () => ({ ...good(), items: [{ productId: 'x', quantity: -1, priceMinor: 1 }] }), 400, 'INVALID_BODY'],
    ['fractional quantity', () => ({ ...good(), items: [{ productId: 'x', quantity: 1.5, priceMinor: 1 }] }), 400, 'INVALID_BODY'],
    ['price as a string', () => ({ ...good(), items: [{ productId: 'x', quantity: 1, priceMinor: '10' }] }), 400, 'INVALID_BODY'],
    ['duplicate productId', () => ({ ...good(), items: [{ productId: 'x', quantity: 1, priceMinor: 1 }, { productId: 'x', quantity: 2, priceMinor: 1 }] }), 422, 'INVALID_SALE'],
    ['one item past the units a sale may hold', () => ({ ...good(), items: [{ productId: 'x', quantity: 1_000_001, priceMinor: 1 }] }), 400, 'INVALID_BODY'],
    ['items within bounds adding up past them', () => ({ ...good(), items: [{ productId: 'x', quantity: 600_000, priceMinor: 1 }, { productId: 'y', quantity: 400_001, priceMinor: 1 }] }), 422, 'INVALID_SALE'],
    ['lower-case currency', () => ({ ...good(), items: [{ productId: 'x', quantity: 1, priceMinor: 1, currency: 'eur' }] }), 400, 'INVALID_BODY'],
    ['unknown field', () => ({ ...good(), stock: 5 }), 400, 'INVALID_BODY'],
    ['empty name', () => ({ ...good(), name: '' }), 400, 'INVALID_BODY'],
    ['a shape fault and a rule broken: the shape wins', () => ({ ...good(), name: '', endsAt: new Date(Date.now() - 3_600_000).toISOString() }), 400, 'INVALID_BODY'],
  ])('%s', async (_name, build, status, code) => {
    const body = build();
    const reply = await internal('POST', '/api/admin/sales', { token: admin, json: body });
    expect(reply.status).toBe(status);
    expect(reply.body.error).toBe(code);
    expect(reply.body.details?.length).toBeGreaterThan(0);
    if (typeof body.name === 'string' && body.name) expect(await salesNamed(body.name)).toBe(0);
  });

  test('broken JSON', async () => {
    const reply = await internal('POST', '/api/admin/sales', { token: admin, body: '{"name": ', headers: { 'content-type': 'application/json' } });
    expect(reply.status).toBe(400);
    expect(reply.body.error).toBe('INVALID_BODY');
  });
});

describe('admin credentials', () => {
  test('no credential → 401 on every admin route; nothing created or loaded', async () => {
    const name = `admin-anon-${run}`;
    const created = await internal('POST', '/api/admin/sales', { json: saleInput(name, [5]) });
    expect(created.status).toBe(401);
    expect(created.body).toEqual({ error: 'TOKEN_MISSING' });
    expect(await salesNamed(name)).toBe(0);
    const sale = await createSale([4]);
    const keys = saleKeys(sale.saleId);
    // The sale as not loaded: no loaded mark, no stock.
    await clients.redis.del(keys.stock(sale.items[0].itemId), keys.loaded);
    for (const [method, path] of [
      ['POST', `/api/admin/sales/${sale.saleId}/stock`],
      ['POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=true`],
      ['GET', `/api/admin/sales/${sale.saleId}`],
    ]) {
      const reply = await internal(method, path);
      expect(reply.status).toBe(401);
      expect(reply.body).toEqual({ error: 'TOKEN_MISSING' });
    }
    expect(await clients.redis.exists(keys.stock(sale.items[0].itemId), keys.loaded)).toBe(0);
  });

  test('a buyer JWT or the payment service credential → 403', async () => {
    const name = `admin-buyer-${run}`;
    for (const token of [await buyerToken(config, `wannabe-admin-${run}`), config.PAYMENT_SERVICE_TOKEN]) {
      const reply = await internal('POST', '/api/admin/sales', { token, json: saleInput(name, [5]) });
      expect(reply.status).toBe(403);
      expect(reply.body).toEqual({ error: 'FORBIDDEN' });
    }
    expect(await salesNamed(name)).toBe(0);
  });

  test('bad or unknown sale ids → 400 INVALID_SALE_ID / 404 SALE_NOT_FOUND', async () => {
    for (const id of ['abc', '0', '01', '2147483648']) {
      const reply = await internal('POST', `/api/admin/sales/${id}/stock`, { token: admin });
      expect(reply.status).toBe(400);
      expect(reply.body).toEqual({ error: 'INVALID_SALE_ID' });
    }
    const unknown = await internal('POST', '/api/admin/sales/2147483647/stock', { token: admin });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'SALE_NOT_FOUND' });
    const get = await internal('GET', '/api/admin/sales/2147483647', { token: admin });
    expect(get.status).toBe(404);
  });
});

test('POST /stock twice is idempotent: a loaded sale keeps its stock, buyers and reservations', async () => {
  const sale = await createSale([5]);
  const itemId = sale.items[0].itemId;
  const bought = await purchase(itemId, `idem-${run}`);
  expect(bought.status).toBe(202);
  accepted.push(bought.body.orderId as string);
  const keys = saleKeys(sale.saleId);
  const state = async () => [
    (await clients.store.view.stock(sale.saleId, [itemId])).get(itemId),
    await clients.redis.hgetall(keys.buyers),
    await clients.redis.hgetall(keys.reservations),
  ];
  const before = await state();
  expect(before[0]).toBe(4);

  for (let i = 0; i < 2; i++) {
    const reply = await internal('POST', `/api/admin/sales/${sale.saleId}/stock`, { token: admin });
    expect(reply.status).toBe(200);
    expect(reply.body.items?.[0].stock).toBe(4);
    expect(await state()).toEqual(before);
  }
});

test('POST /stock with a flag that is not "true" or "false" → 400 INVALID_QUERY and nothing is loaded', async () => {
  const sale = await createSale([6]);
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);
  // The sale as never loaded: no loaded mark, no stock, its epoch 0.
  await unload(clients, sale.saleId);
  for (const query of ['rebuild=AAA', 'rebuild=TRUE', 'rebuild=1', 'force=yes', 'rebuild=true&rebuild=false', 'rebuild=']) {
    const reply = await internal('POST', `/api/admin/sales/${sale.saleId}/stock?${query}`, { token: admin });
    expect({ query, status: reply.status, error: reply.body.error }).toEqual({ query, status: 400, error: 'INVALID_QUERY' });
    expect(await clients.redis.exists(keys.stock(itemId), keys.loaded)).toBe(0);
  }
  // The same request with a well-formed flag does load the stock: the refusals above held back a real change.
  const loaded = await internal('POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=false`, { token: admin });
  expect([loaded.status, loaded.body.items?.[0].stock]).toEqual([200, 6]);
});

test('?rebuild=true after the sale’s Redis keys were lost restores stock = quantity − pending − paid and the live orders', async () => {
  const sale = await createSale([10]);
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);
  const payer = `rebuild-payer-${run}`;
  const waiter = `rebuild-waiter-${run}`;
  const paidOrder = await purchase(itemId, payer);
  const pendingOrder = await purchase(itemId, waiter);
  expect([paidOrder.status, pendingOrder.status]).toEqual([202, 202]);
  const paidId = paidOrder.body.orderId as string;
  const pendingId = pendingOrder.body.orderId as string;
  accepted.push(paidId, pendingId);
  const pay = await internal('POST', `/api/flash-sales/orders/${paidId}/payment`, {
    token: config.PAYMENT_SERVICE_TOKEN,
    json: { paymentId: `rebuild-${run}`, amount: 2500 },
  });
  expect(pay.status).toBe(200);
  await eventually(async () => {
    const { rows } = await clients.pool.query('SELECT id, status FROM orders WHERE sale_id = $1 ORDER BY status', [sale.saleId]);
    expect(rows).toEqual([
      { id: paidId, status: 'PAID' },
      { id: pendingId, status: 'PENDING' },
    ]);
  });
  const reservationsBefore = await clients.redis.hgetall(keys.reservations);

  // Redis loses the sale (its loaded mark with the rest).
  await clients.redis.del(keys.stock(itemId), keys.buyers, keys.reservations, keys.loaded);
  const lost = await internal('GET', `/api/admin/sales/${sale.saleId}`, { token: admin });
  expect(lost.body.items?.[0].stock).toBeNull();
  const meanwhile = await purchase(itemId, `rebuild-meanwhile-${run}`);
  expect(meanwhile.status).toBe(503);
  expect(meanwhile.body).toEqual({ error: 'STOCK_NOT_LOADED' });

  const rebuilt = await internal('POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=true`, { token: admin });
  expect(rebuilt.status).toBe(200);
  expect(rebuilt.body.items?.[0]).toMatchObject({ quantity: 10, sold: 2, stock: 8 });
  expect((await clients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(8);
  // The free units are those no live order holds: the paid order holds unit 1, the pending one unit 2.
  expect(await clients.redis.lrange(keys.stock(itemId), 0, -1)).toEqual(['3', '4', '5', '6', '7', '8', '9', '10']);
  expect(await clients.redis.hgetall(keys.buyers)).toEqual({ [payer]: paidId, [waiter]: pendingId });
  const reservationsAfter = await clients.redis.hgetall(keys.reservations);
  expect(Object.keys(reservationsAfter).sort()).toEqual([paidId, pendingId].sort());
  // Unit, then the shard's epoch: the rebuild moved it on from the load's 1 to 2.
  expect(reservationsAfter[paidId]).toMatch(new RegExp(`^${itemId}\\|${payer}\\|\\d+\\|\\d+\\|\\d+\\|1\\|2$`));
  expect(reservationsAfter[pendingId]).toMatch(new RegExp(`^${itemId}\\|${waiter}\\|\\d+\\|\\d+\\|\\d+\\|2\\|2$`));
  // reservedAt comes back from PostgreSQL (ms precision), so the rebuilt entries equal the lost ones but for the epoch.
  const withoutEpoch = (values: Record<string, string>) => Object.fromEntries(Object.entries(values).map(([id, value]) => [id, value.replace(/\|\d+$/, '')]));
  expect(withoutEpoch(reservationsAfter)).toEqual(withoutEpoch(reservationsBefore));
  expect(Object.values(reservationsBefore).every((value) => value.endsWith('|1'))).toBe(true);

  // Redis enforces one-per-buyer again, and sells the rest.
  const again = await purchase(itemId, waiter);
  expect(again.status).toBe(409);
  expect(again.body).toEqual({ error: 'ALREADY_PURCHASED', orderId: pendingId });
  const fresh = await purchase(itemId, `rebuild-fresh-${run}`);
  expect(fresh.status).toBe(202);
  accepted.push(fresh.body.orderId as string);
  expect((await clients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(7);
});
