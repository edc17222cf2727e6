/**
 * What the sale page reads without a token: the public sale view (items, prices, sold out or not, the
 * server's time) with its CDN headers and weak ETag, the never-cached server time, the page's static files,
 * and the development sign-in, which exists only with the development JWT secret outside production. Every response is checked against openapi.yaml.
 */
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { startApi } from '../../src/api/main';
import { buyerToken, createTestSale, eventually, rawRequest, testConfig, type Clients } from '../support/helpers';
import { http, type Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const config = testConfig();
const app = useAppHarness(config, 'sale-view');
let clients: Clients;
let call: Http;
beforeAll(() => ({ clients, call } = app));

test('GET the sale view: name, times, items with name, price, units left and sold-out mark, server time; cacheable for a second', async () => {
  const sale = await createTestSale(clients, { quantities: [3, 0], priceMinor: 1250, names: ['Air Runner 90: red, size 42'] });
  const before = Date.now();
  const reply = await call('GET', `/api/flash-sales/sales/${sale.saleId}`);
  expect(reply.status).toBe(200);
  expect(reply.headers.get('cache-control')).toBe('public, max-age=1');
  expect(reply.headers.get('etag')).toMatch(/^W\/"[A-Za-z0-9_-]{22}"$/);
  expect(reply.body).toMatchObject({
    saleId: sale.saleId,
    name: sale.name,
    startsAt: sale.startsAt.toISOString(),
    endsAt: sale.endsAt.toISOString(),
    items: [
      { itemId: sale.items[0].itemId, productId: 'p0', name: 'Air Runner 90: red, size 42', priceMinor: 1250, currency: 'EUR', unitsLeft: 3, soldOut: false },
      { itemId: sale.items[1].itemId, productId: 'p1', name: 'p1', priceMinor: 1250, currency: 'EUR', unitsLeft: 0, soldOut: true },
    ],
  });
  const serverTime = Date.parse(reply.body.serverTime as string);
  expect(serverTime).toBeGreaterThanOrEqual(before - 5);
  expect(serverTime).toBeLessThanOrEqual(Date.now() + 5);
});

test('If-None-Match with the ETag → 304 while the content is the same; a sale of the last unit changes it within the cache\'s second', async () => {
  const sale = await createTestSale(clients, { quantities: [1] });
  const path = `/api/flash-sales/sales/${sale.saleId}`;
  const first = await call('GET', path);
  const etag = first.headers.get('etag') as string;
  const again = await rawRequest('GET', `${app.api.url}${path}`, { 'if-none-match': etag });
  expect(again.status).toBe(304);
  expect(again.headers.etag).toBe(etag);
  expect(again.text).toBe('');

  const bought = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, `view-${randomUUID()}`) });
  expect(bought.status).toBe(202);
  app.accepted.push(bought.body.orderId as string);
  // The process's cache answers the old content for up to a second.
  const after = await eventually(async () => {
    const reply = await rawRequest('GET', `${app.api.url}${path}`, { 'if-none-match': etag });
    expect(reply.status).toBe(200);
    return reply;
  }, 3000);
  expect(after.headers.etag).not.toBe(etag);
  expect(JSON.parse(after.text)).toMatchObject({ items: [{ unitsLeft: 0, soldOut: true }] });
  // A reload (Cache-Control: no-cache) is answered in full whatever its If-None-Match.
  const reload = await rawRequest('GET', `${app.api.url}${path}`, { 'if-none-match': after.headers.etag as string, 'cache-control': 'no-cache' });
  expect(reload.status).toBe(200);
});

test('a view read just before the start carries the gate from the start, though its content is still cached', async () => {
  // The read 600 ms before the start, however long the set-up took on a busy host (an 800 ms start once ran out).
  const sale = await createTestSale(clients, { quantities: [1], startsInMs: 3000 });
  const path = `/api/flash-sales/sales/${sale.saleId}`;
  await new Promise((resolve) => setTimeout(resolve, sale.startsAt.getTime() - 600 - Date.now()));
  const before = await call('GET', path);
  expect(before.body.gate).toBeUndefined();
  // In the last second before the start: no CDN may keep it across the start.
  expect(before.headers.get('cache-control')).toBe('public, max-age=0');
  // Within the cache's second: the gate is added by the request's clock, not by a fresh read.
  await new Promise((resolve) => setTimeout(resolve, sale.startsAt.getTime() + 20 - Date.now()));
  const after = await call('GET', path);
  expect(after.body.gate).toMatch(/^[A-Za-z0-9_-]{22}$/);
  expect(after.headers.get('cache-control')).toBe('public, max-age=1');
  expect(after.headers.get('etag')).not.toBe(before.headers.get('etag'));
});

test('GET the server time: never cached, the clock of the answer', async () => {
  const before = Date.now();
  const reply = await call('GET', '/api/flash-sales/time');
  expect(reply.status).toBe(200);
  expect(reply.headers.get('cache-control')).toBe('no-store');
  const serverTime = Date.parse(reply.body.serverTime as string);
  expect(serverTime).toBeGreaterThanOrEqual(before - 5);
  expect(serverTime).toBeLessThanOrEqual(Date.now() + 5);
});

test('a sale id that is not one → 400 INVALID_SALE_ID; an unknown sale → 404 SALE_NOT_FOUND', async () => {
  await expect(call('GET', '/api/flash-sales/sales/abc')).resolves.toMatchObject({ status: 400, body: { error: 'INVALID_SALE_ID' } });
  await expect(call('GET', '/api/flash-sales/sales/2147483647')).resolves.toMatchObject({ status: 404, body: { error: 'SALE_NOT_FOUND' } });
});

test('the page and its files are served as they are; an unknown file → 404, a bad sale id → 400', async () => {
  const page = await call('GET', '/sale/42');
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(page.text).toContain('<script type="module" src="/sale/assets/sale.js"></script>');
  expect(page.headers.get('x-content-type-options')).toBe('nosniff');
  expect(page.headers.get('content-security-policy')).toBe("default-src 'self'; frame-ancestors 'none'");
  const script = await call('GET', '/sale/assets/sale.js');
  expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
  expect(script.text).toContain('/api/flash-sales/sales/');
  // Every module the page imports, and the modules they import, are served as scripts.
  const seen = new Set(['sale.js']);
  const pending = [script.text];
  while (pending.length) {
    for (const [, file] of (pending.pop() as string).matchAll(/^import .* from '\.\/([a-z]+\.js)';$/gm)) {
      if (seen.has(file)) continue;
      seen.add(file);
      const module = await call('GET', `/sale/assets/${file}`);
      expect([file, module.status, module.headers.get('content-type')]).toEqual([file, 200, 'text/javascript; charset=utf-8']);
      pending.push(module.text);
    }
  }
  expect([...seen].sort()).toEqual(['format.js', 'order.js', 'page.js', 'render.js', 'sale.js']);
  await expect(call('GET', '/sale/assets/sale.css')).resolves.toMatchObject({ status: 200 });
  await expect(call('GET', '/sale/assets/secrets.txt')).resolves.toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
  await expect(call('GET', '/sale/0')).resolves.toMatchObject({ status: 400, body: { error: 'INVALID_SALE_ID' } });
});

test('development sign-in: a token the purchase route admits; a bad buyer id → 400 INVALID_BODY', async () => {
  const sale = await createTestSale(clients, { quantities: [1] });
  const reply = await call('POST', '/api/dev/token', { json: { buyerId: `dev-${randomUUID()}` } });
  expect(reply.status).toBe(200);
  expect(reply.body.expiresInS).toBe(3600);
  const bought = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: reply.body.token as string });
  expect(bought.status).toBe(202);
  app.accepted.push(bought.body.orderId as string);
  for (const buyerId of ['', 'a|b', 'x'.repeat(129)]) {
    await expect(call('POST', '/api/dev/token', { json: { buyerId } })).resolves.toMatchObject({ status: 400, body: { error: 'INVALID_BODY' } });
  }
  await expect(call('POST', '/api/dev/token', { json: { buyerId: 'ok', admin: true } })).resolves.toMatchObject({ status: 400 });
});

test('development Pay: the buyer pays their own order its price (paymentId dev-ORDER_ID); anyone else → 404, changing nothing', async () => {
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: 1250 });
  const [alice, bob] = [`alice-${randomUUID()}`, `bob-${randomUUID()}`];
  const bought = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: await buyerToken(config, alice) });
  expect(bought.status).toBe(202);
  const orderId = bought.body.orderId as string;
  app.accepted.push(orderId);
  const path = `/api/dev/orders/${orderId}/payment`;

  await expect(call('POST', path, { token: await buyerToken(config, bob) })).resolves.toMatchObject({ status: 404, body: { error: 'ORDER_NOT_FOUND' } });
  await expect(call('POST', path)).resolves.toMatchObject({ status: 401 });
  await expect(call('POST', `/api/dev/orders/${randomUUID()}/payment`, { token: await buyerToken(config, alice) })).resolves.toMatchObject({ status: 404 });
  const row = () => clients.pool.query('SELECT status, payment_id AS "paymentId" FROM orders WHERE id = $1', [orderId]).then((r) => r.rows[0]);
  expect((await row())?.status ?? 'no row').not.toBe('PAID');

  const paid = await call('POST', path, { token: await buyerToken(config, alice) });
  expect(paid).toMatchObject({ status: 200, body: { orderId, status: 'PAID', paymentId: `dev-${orderId}` } });
  expect(await row()).toEqual({ status: 'PAID', paymentId: `dev-${orderId}` });
  const order = await call('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, alice) });
  expect(order.body).toMatchObject({ status: 'PAID', paymentId: `dev-${orderId}` });
});

test.each<[string, Record<string, string>, { production?: true }]>([
  // The local stack's PostgreSQL has the development password, which a production configuration refuses: this
  // one is validated as a test's, then said to be production, which is what the routes read (what production
  // refuses: productionIssues in src/config/).
  ['in production', { JWT_SECRET: randomUUID(), ADMIN_TOKEN: randomUUID(), PAYMENT_SERVICE_TOKEN: randomUUID(), SALE_GATE_SECRET: randomUUID() }, { production: true }],
  ['with a real JWT_SECRET, whatever NODE_ENV says', { NODE_ENV: 'development', JWT_SECRET: `real-${randomUUID()}` }, {}],
  ['with RS256', { JWT_ALGORITHM: 'RS256', JWT_PUBLIC_KEY: generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ type: 'spki', format: 'pem' }).toString() }, {}],
])('no development sign-in %s: POST /api/dev/token and the development Pay → 404', async (_name, overrides, { production }) => {
  const settings = testConfig(overrides);
  const api = await startApi(production ? { ...settings, NODE_ENV: 'production' } : settings);
  try {
    await expect(http(api.url)('POST', '/api/dev/token', { json: { buyerId: 'mallory' } })).resolves.toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
    await expect(http(api.url)('POST', `/api/dev/orders/${randomUUID()}/payment`)).resolves.toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
  } finally {
    await api.close();
  }
});
