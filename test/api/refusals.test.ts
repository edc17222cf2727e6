/**
 * Refused purchases change nothing (I6, I7): every bad token is a 401 with its JSON code, every bad item id a
 * 400, an unknown item a 404, a sale outside its window a 403 — and the sale's Redis keys (stock, buyers,
 * reservations) and PostgreSQL rows (orders, live orders per item) are exactly as before. The buyer is the token's
 * `sub`, whatever the body or headers claim. On an item flagged sold out, a JWT-shaped token is answered 410
 * before verification (the same answer for every buyer). Every response is checked against openapi.yaml.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { generateKeyPair, SignJWT } from 'jose';
import { newOrderId } from '../../src/order/orderId';
import { saleKeys } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { buyerToken, eventually, createTestSale, rawRequest, reserveUnit, testConfig, type Clients, until } from '../support/helpers';
import type { CallOptions, Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const config = testConfig();
const app = useAppHarness(config, 'refusals');
const { accepted } = app;
let clients: Clients;
let call: Http;
beforeAll(() => ({ clients, call } = app));
const run = randomUUID().slice(0, 8);
const secret = new TextEncoder().encode(config.JWT_SECRET);

let sale: Sale;
let itemId: number;

beforeAll(async () => {
  sale = await createTestSale(clients, { quantities: [10] });
  itemId = sale.items[0].itemId;
});

/** Everything a purchase could change for one sale: Redis keys and PostgreSQL rows. */
async function snapshot(of: Sale) {
  const keys = saleKeys(of.saleId);
  const stock = await clients.store.view.stock(
    of.saleId,
    of.items.map((i) => i.itemId),
  );
  const units = await clients.store.view.unitsByShard(
    of.saleId,
    of.items.map((i) => i.itemId),
  );
  const orders = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders WHERE sale_id = $1', [of.saleId]);
  // Units sold per item: its live orders, each holding one unit.
  const sold = await clients.pool.query<{ id: number; sold: number }>(
    `SELECT i.id, (SELECT count(*)::int FROM orders o WHERE o.item_id = i.id AND o.status IN ('PENDING', 'PAID')) AS sold
     FROM items i WHERE i.sale_id = $1 ORDER BY i.id`,
    [of.saleId],
  );
  return {
    stock: Object.fromEntries(stock),
    units: Object.fromEntries(units),
    buyers: await clients.redis.hgetall(keys.buyers),
    reservations: await clients.redis.hgetall(keys.reservations),
    orders: orders.rows[0].n,
    sold: sold.rows,
  };
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const nowS = () => Math.floor(Date.now() / 1000);
const hs256 = () => new SignJWT({}).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setIssuedAt();

const purchasePath = (item: number) => `/api/flash-sales/items/${item}/purchase`;
const bearer = (token: string): CallOptions => ({ headers: { authorization: `Bearer ${token}` } });

/**
 * Bad tokens: name, the request (path defaults to the purchase of the item given), the 401 code, and whether
 * the header carries a JWT-shaped bearer token, which on an item flagged sold out is answered 410 before its
 * signature and claims are checked.
 */
const badTokens: [string, (item: number) => Promise<{ path?: string; options: CallOptions }>, string, boolean][] = [
  ['no Authorization header', async () => ({ options: {} }), 'TOKEN_MISSING', false],
  ['"Bearer" and nothing else', async () => ({ options: { headers: { authorization: 'Bearer' } } }), 'TOKEN_MISSING', false],
  ['another scheme (Basic)', async () => ({ options: { headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } } }), 'TOKEN_MISSING', false],
  ['Bearer with garbage', async () => ({ options: bearer('garbage') }), 'TOKEN_INVALID', false],
  ['Bearer with characters outside the token alphabet', async () => ({ options: bearer('not a token!') }), 'TOKEN_MISSING', false],
  [
    'signed with the wrong secret',
    async () => ({ options: bearer(await hs256().setSubject('mallory').setExpirationTime('1h').sign(new TextEncoder().encode('x'.repeat(64)))) }),
    'TOKEN_INVALID',
    true,
  ],
  [
    'alg: none (unsigned)',
    async () => ({ options: bearer(`${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({ sub: 'mallory', exp: nowS() + 3600 })}.`) }),
    'TOKEN_INVALID',
    true,
  ],
  [
    'HS512 with the right secret',
    async () => ({
      options: bearer(await new SignJWT({}).setProtectedHeader({ alg: 'HS512' }).setSubject('mallory').setExpirationTime('1h').sign(secret)),
    }),
    'TOKEN_INVALID',
    true,
  ],
  [
    'RS256 (another algorithm family)',
    async () => {
      const { privateKey } = await generateKeyPair('RS256');
      return { options: bearer(await new SignJWT({}).setProtectedHeader({ alg: 'RS256' }).setSubject('mallory').setExpirationTime('1h').sign(privateKey)) };
    },
    'TOKEN_INVALID',
    true,
  ],
  ['expired', async () => ({ options: bearer(await buyerToken(config, 'late', nowS() - 60)) }), 'TOKEN_EXPIRED', true],
  [
    'nbf in the future',
    async () => ({ options: bearer(await hs256().setSubject('early').setNotBefore('1h').setExpirationTime('2h').sign(secret)) }),
    'TOKEN_INVALID',
    true,
  ],
  ['no exp', async () => ({ options: bearer(await hs256().setSubject('forever').sign(secret)) }), 'TOKEN_INVALID', true],
  ['sub missing', async () => ({ options: bearer(await hs256().setExpirationTime('1h').sign(secret)) }), 'TOKEN_INVALID', true],
  ['sub empty', async () => ({ options: bearer(await hs256().setSubject('').setExpirationTime('1h').sign(secret)) }), 'TOKEN_INVALID', true],
  ['sub containing "|"', async () => ({ options: bearer(await buyerToken(config, 'alice|bob')) }), 'TOKEN_INVALID', true],
  ['sub of 300 characters', async () => ({ options: bearer(await buyerToken(config, 'a'.repeat(300))) }), 'TOKEN_INVALID', true],
  [
    'sub that is a number',
    async () => ({ options: bearer(await new SignJWT({ sub: 42 } as never).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('1h').sign(secret)) }),
    'TOKEN_INVALID',
    true,
  ],
  [
    'a valid token in the query string',
    async (item) => {
      const token = await buyerToken(config, `query-${run}`);
      return { path: `${purchasePath(item)}?access_token=${token}&token=${token}`, options: {} };
    },
    'TOKEN_MISSING',
    false,
  ],
  [
    'a valid token in the body',
    async () => {
      const token = await buyerToken(config, `body-${run}`);
      return { options: { json: { access_token: token, token, authorization: `Bearer ${token}` } } };
    },
    'TOKEN_MISSING',
    false,
  ],
];

describe('every bad token → 401 with its code, nothing changed', () => {
  test.each(badTokens)('%s', async (_name, build, code) => {
    const { path, options } = await build(itemId);
    const before = await snapshot(sale);
    const reply = await call('POST', path ?? purchasePath(itemId), options);
    expect(reply.status).toBe(401);
    expect(reply.body).toEqual({ error: code });
    expect(reply.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(await snapshot(sale)).toEqual(before);
  });
});

describe('an item flagged sold out: 410 for any JWT-shaped token before verification', () => {
  let soldOut: Sale;
  let soldOutItem: number;

  beforeAll(async () => {
    soldOut = await createTestSale(clients, { quantities: [0] });
    soldOutItem = soldOut.items[0].itemId;
    // A verified buyer's press reaches Redis (no stock) and flags the item sold out.
    const first = await call('POST', purchasePath(soldOutItem), { token: await buyerToken(config, `flagger-${run}`) });
    expect(first.body).toEqual({ error: 'SOLD_OUT' });
  });

  test.each(badTokens)('%s', async (_name, build, code, jwtShaped) => {
    const { path, options } = await build(soldOutItem);
    const before = await snapshot(soldOut);
    const loose = await call('POST', path ?? purchasePath(soldOutItem), options);
    expect([loose.status, loose.body]).toEqual(jwtShaped ? [410, { error: 'SOLD_OUT' }] : [401, { error: code }]);
    expect(await snapshot(soldOut)).toEqual(before);
  });

  test('once a unit comes back, the flag clears within SOLD_OUT_RECHECK_MS and a forged token is verified again (401)', async () => {
    const restocked = await createTestSale(clients, { quantities: [1] });
    const item = restocked.items[0].itemId;
    // Its one unit is held by a stored order, as after a press and the drain (a reconciler anywhere agrees with it).
    const holder = await reserveUnit(clients, {
      orderId: newOrderId(restocked.saleId),
      saleId: restocked.saleId,
      itemId: item,
      userId: `holder-${run}`,
      priceMinor: 100,
      paymentWindowMs: 60_000,
      reservedAtMs: Date.now(),
    });
    await clients.redis.del(saleKeys(restocked.saleId).startQueue);
    await clients.orders.place(holder);
    const forged = bearer(`${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({ sub: 'mallory', exp: nowS() + 3600 })}.`);
    const flagger = await call('POST', purchasePath(item), { token: await buyerToken(config, `flagger-2-${run}`) });
    expect(flagger.body).toEqual({ error: 'SOLD_OUT' });
    expect((await call('POST', purchasePath(item), forged)).status).toBe(410);
    // The unit comes back through another process (an operator's cancel there): this API process is not told.
    expect(await clients.orders.cancel(holder.orderId, 'OPERATOR')).toMatchObject({ reason: 'OPERATOR' });
    await clients.store.release(holder);
    await eventually(async () => expect((await call('POST', purchasePath(item), forged)).body).toEqual({ error: 'TOKEN_INVALID' }), 5000);
    expect(await clients.store.view.stock(restocked.saleId, [item])).toEqual(new Map([[item, 1]]));
  });
});

test('the buyer is the token’s sub: a body userId or identity headers cannot impersonate anyone', async () => {
  const attacker = `attacker-${run}`;
  const victim = `victim-${run}`;
  const before = await snapshot(sale);
  const reply = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, {
    token: await buyerToken(config, attacker),
    json: { userId: victim, buyerId: victim, sub: victim },
    headers: { 'x-user-id': victim, 'x-buyer-id': victim, 'x-forwarded-user': victim },
  });
  expect(reply.status).toBe(202);
  const orderId = reply.body.orderId as string;
  accepted.push(orderId);

  const after = await snapshot(sale);
  expect(after.stock[itemId]).toBe((before.stock[itemId] as number) - 1);
  expect(after.buyers).toEqual({ ...before.buyers, [attacker]: orderId });
  // The order holds the unit at the head of the free list, which left it.
  const [head, ...rest] = before.units[itemId][0] as number[];
  expect(after.units[itemId]).toEqual([rest]);
  expect(after.reservations[orderId]).toMatch(new RegExp(`^${itemId}\\|${attacker}\\|\\d+\\|\\d+\\|\\d+\\|${head}\\|1$`));
  // The victim can still buy (they hold nothing) and cannot see the order; the attacker can.
  const asVictim = await call('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, victim) });
  expect(asVictim.status).toBe(404);
  const asAttacker = await call('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, attacker) });
  expect(asAttacker.status).toBe(200);
  await eventually(async () => {
    const { rows } = await clients.pool.query('SELECT user_id FROM orders WHERE id = $1', [orderId]);
    expect(rows).toEqual([{ user_id: attacker }]);
  });
});

describe('bad item ids → 400 INVALID_ITEM_ID, nothing changed', () => {
  test.each(['abc', '-1', '0', '0x10', '1e3', '01', '%201', '1.0', '9007199254740993', '2147483648', '99999999999', '1%2F2', '+1'])(
    '%s',
    async (raw) => {
      const before = await snapshot(sale);
      const reply = await call('POST', `/api/flash-sales/items/${raw}/purchase`, { token: await buyerToken(config, `ids-${run}`) });
      expect(reply.status).toBe(400);
      expect(reply.body).toEqual({ error: 'INVALID_ITEM_ID' });
      expect(await snapshot(sale)).toEqual(before);
    },
  );
});

test('a valid id with no item → 404 ITEM_NOT_FOUND', async () => {
  const before = await snapshot(sale);
  const reply = await call('POST', '/api/flash-sales/items/2147483647/purchase', { token: await buyerToken(config, `unknown-${run}`) });
  expect(reply.status).toBe(404);
  expect(reply.body).toEqual({ error: 'ITEM_NOT_FOUND' });
  expect(await snapshot(sale)).toEqual(before);
});

describe('sale outside its window → 403 SALE_NOT_ACTIVE, nothing changed', () => {
  test.each([
    ['not started yet', { startsInMs: 3_600_000 }],
    ['already ended', { startsInMs: -7_200_000, durationMs: 3_600_000 }],
  ])('%s', async (_name, window) => {
    const closed = await createTestSale(clients, { quantities: [5], ...window });
    const before = await snapshot(closed);
    expect(before.stock[closed.items[0].itemId]).toBe(5);
    const reply = await call('POST', `/api/flash-sales/items/${closed.items[0].itemId}/purchase`, { token: await buyerToken(config, `window-${run}`) });
    expect(reply.status).toBe(403);
    expect(reply.body).toEqual({ error: 'SALE_NOT_ACTIVE' });
    expect(await snapshot(closed)).toEqual(before);
  });
});

test('a token the API remembers as verified is refused once it expires', async () => {
  const purchase = '/api/flash-sales/items/2147483647/purchase';
  const expiresAtS = nowS() + 2;
  const token = await buyerToken(config, `short-${run}`, expiresAtS);
  // Admitted (then 404: no such item), twice, so the second answer comes from the remembered verification.
  for (let i = 0; i < 2; i++) expect((await call('POST', purchase, { token })).body).toEqual({ error: 'ITEM_NOT_FOUND' });
  await until('the token past its expiry', async () => Date.now() > expiresAtS * 1000 || undefined, 5000);
  const late = await call('POST', purchase, { token });
  expect(late.status).toBe(401);
  expect(late.body).toEqual({ error: 'TOKEN_EXPIRED' });
  const order = await call('GET', `/api/flash-sales/orders/${randomUUID()}`, { token });
  expect(order.body).toEqual({ error: 'TOKEN_EXPIRED' });
});

test('other methods on the purchase path answer as the router does elsewhere, nothing changed', async () => {
  const before = await snapshot(sale);
  const token = await buyerToken(config, `method-${run}`);
  const send = (method: string) =>
    fetch(`${app.api.url}/api/flash-sales/items/${itemId}/purchase`, { method, headers: { authorization: `Bearer ${token}` } });
  for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
    const reply = await send(method);
    expect({ method, status: reply.status, allow: reply.headers.get('allow'), body: await reply.json() }).toEqual({
      method,
      status: 405,
      allow: 'POST',
      body: { error: 'METHOD_NOT_ALLOWED' },
    });
  }
  const options = await send('OPTIONS');
  expect([options.status, options.headers.get('allow'), await options.text()]).toEqual([200, 'POST', '']);
  // fetch refuses TRACE (and knows no QUERY), so these go through node:http.
  for (const method of ['PROPFIND', 'TRACE', 'QUERY']) {
    const other = await rawRequest(method, `${app.api.url}/api/flash-sales/items/${itemId}/purchase`, { authorization: `Bearer ${token}` });
    expect({ method, status: other.status, allow: other.headers.allow, body: JSON.parse(other.text) }).toEqual({
      method,
      status: 405,
      allow: 'POST',
      body: { error: 'METHOD_NOT_ALLOWED' },
    });
  }
  expect(await snapshot(sale)).toEqual(before);
});

test('TRACE and QUERY on the router’s routes → 405 METHOD_NOT_ALLOWED with the Allow of the path (RFC 9110), not 501', async () => {
  const token = await buyerToken(config, `trace-${run}`);
  // The admin routes on the internal door, the others on the public one.
  const cases: [string, string, string][] = [
    ['TRACE', '/healthz', 'HEAD, GET'],
    ['QUERY', '/healthz', 'HEAD, GET'],
    ['TRACE', `/api/flash-sales/orders/${randomUUID()}`, 'HEAD, GET'],
    ['QUERY', '/api/admin/sales', 'POST'],
    ['TRACE', `/api/admin/sales/${sale.saleId}/stock`, 'POST'],
  ];
  for (const [method, path, allow] of cases) {
    const door = path.startsWith('/api/admin/') ? app.api.internalUrl : app.api.url;
    const reply = await rawRequest(method, `${door}${path}`, { authorization: `Bearer ${token}` });
    expect({ method, path, status: reply.status, allow: reply.headers.allow, body: JSON.parse(reply.text) }).toEqual({
      method,
      path,
      status: 405,
      allow,
      body: { error: 'METHOD_NOT_ALLOWED' },
    });
  }
  const unknownPath = await rawRequest('TRACE', `${app.api.url}/nowhere`);
  expect([unknownPath.status, JSON.parse(unknownPath.text)]).toEqual([404, { error: 'NOT_FOUND' }]);
});

test('the purchase path with a trailing slash or in another letter case is still the purchase route', async () => {
  const token = await buyerToken(config, `spelling-${run}`);
  for (const path of ['/api/flash-sales/items/2147483647/purchase/', '/API/Flash-Sales/ITEMS/2147483647/Purchase']) {
    const reply = await fetch(`${app.api.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    expect({ path, status: reply.status, body: await reply.json() }).toEqual({ path, status: 404, body: { error: 'ITEM_NOT_FOUND' } });
  }
});

describe('requests Node refuses before Koa → JSON with a code, nothing changed', () => {
  /** Sends raw bytes and reads until the server closes the connection. */
  async function raw(request: string): Promise<{ status: number; contentType: string; body: unknown }> {
    const { port } = new URL(app.api.url);
    const socket = connect(Number(port), '127.0.0.1');
    socket.end(request);
    const chunks: Buffer[] = [];
    for await (const chunk of socket) chunks.push(chunk as Buffer);
    const [head, body] = Buffer.concat(chunks).toString('utf8').split('\r\n\r\n');
    return {
      status: Number(head.split(' ')[1]),
      contentType: /content-type: (.*)/i.exec(head)?.[1] ?? '',
      body: JSON.parse(body) as unknown,
    };
  }

  test.each([
    ['a 20 KB header', 431, 'HEADERS_TOO_LARGE', () => `POST /api/flash-sales/items/${itemId}/purchase HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`],
    ['a request line that is not HTTP', 400, 'BAD_REQUEST', () => 'BUY ME NOW PLEASE\r\n\r\n'],
    ['a broken chunked body', 400, 'BAD_REQUEST', () => `POST /api/flash-sales/items/${itemId}/purchase HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n`],
  ])('%s → %d %s', async (_name, status, code, request) => {
    const before = await snapshot(sale);
    const reply = await raw(request());
    expect(reply).toEqual({ status, contentType: 'application/json; charset=utf-8', body: { error: code } });
    expect(await snapshot(sale)).toEqual(before);
  });
});
