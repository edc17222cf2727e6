/**
 * Orders and payment over HTTP with a real worker running the order workflows: a buyer sees only their own
 * order (I6: someone else's is indistinguishable from an unknown id), and the payment service's route
 * (its own bearer credential) is decided in PostgreSQL: PAID once, idempotent per paymentId,
 * ORDER_NOT_PENDING for a second payment, AMOUNT_MISMATCH for a wrong amount. Every response is checked
 * against openapi.yaml.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import type { Client } from '@temporalio/client';
import pino from 'pino';
import { startApi } from '../../src/api/main';
import { newOrderId } from '../../src/order/orderId';
import type { Sale } from '../../src/sale/sales';
import { buyerToken, type Clients, createTestSale, eventually, orderResult, orderRow, testConfig } from '../support/helpers';
import { http, type Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const PRICE = 1999;
const config = testConfig();
const app = useAppHarness(config, 'orders-payment');
const { accepted } = app;
let clients: Clients;
let temporal: Client;
let call: Http;
let internal: Http;
beforeAll(() => ({ clients, temporal, call, internal } = app));
const run = randomUUID().slice(0, 8);

let sale: Sale;

beforeAll(async () => {
  sale = await createTestSale(clients, { quantities: [20], priceMinor: PRICE });
});


/** A fresh buyer buys one unit; @returns their token and the accepted orderId */
async function buy(name: string): Promise<{ buyer: string; token: string; orderId: string }> {
  const buyer = `${name}-${run}`;
  const token = await buyerToken(config, buyer);
  const reply = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token });
  expect(reply.status).toBe(202);
  const orderId = reply.body.orderId as string;
  accepted.push(orderId);
  return { buyer, token, orderId };
}

async function persisted(orderId: string): Promise<void> {
  await eventually(async () => expect(await orderRow(clients.pool, orderId)).toBeDefined());
}

const orderPath = (orderId: string) => `/api/flash-sales/orders/${orderId}`;
const paymentPath = (orderId: string) => `/api/flash-sales/orders/${orderId}/payment`;
const service = config.PAYMENT_SERVICE_TOKEN;

describe('reading an order', () => {
  test('only its buyer reads it; anyone else gets the very answer of an unknown id', async () => {
    const alice = await buy('reader-alice');
    const bob = await buyerToken(config, `reader-bob-${run}`);

    // Right after the 202 (the row may not be in PostgreSQL yet: the order's reservation in Redis answers) …
    const unknown = await call('GET', orderPath(randomUUID()), { token: bob });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'ORDER_NOT_FOUND' });
    const early = await call('GET', orderPath(alice.orderId), { token: bob });
    expect(early.status).toBe(404);
    expect(early.text).toBe(unknown.text);
    const own = await call('GET', orderPath(alice.orderId), { token: alice.token });
    expect(own.status).toBe(200);
    expect(own.body).toMatchObject({ orderId: alice.orderId, saleId: sale.saleId, itemId: sale.items[0].itemId, status: 'PENDING' });

    // … and once it is stored (PostgreSQL answers).
    await persisted(alice.orderId);
    const late = await call('GET', orderPath(alice.orderId), { token: bob });
    expect(late.status).toBe(404);
    expect(late.text).toBe(unknown.text);
    const stored = await call('GET', orderPath(alice.orderId), { token: alice.token });
    expect(stored.status).toBe(200);
    expect(stored.body).toEqual({
      orderId: alice.orderId,
      saleId: sale.saleId,
      itemId: sale.items[0].itemId,
      userId: alice.buyer,
      status: 'PENDING',
      priceMinor: PRICE,
      paymentDeadline: expect.any(String),
    });
  });

  test.each(['not-a-uuid', '123', 'D0E5B5B2-0C1E-4C3A-9F1E-2B7A4C9D8E11', 'd0e5b5b2-0c1e-4c3a-9f1e-2b7a4c9d8e11x', '%20'])('malformed order id %s → 404 ORDER_NOT_FOUND', async (id) => {
    const reply = await call('GET', orderPath(id), { token: await buyerToken(config, `malformed-${run}`) });
    expect(reply.status).toBe(404);
    expect(reply.body).toEqual({ error: 'ORDER_NOT_FOUND' });
  });

  test('without a valid buyer token → 401', async () => {
    const reply = await call('GET', orderPath(randomUUID()));
    expect(reply.status).toBe(401);
    expect(reply.body).toEqual({ error: 'TOKEN_MISSING' });
  });
});

describe('payment route', () => {
  test('credentials: none → 401, a wrong one or a buyer JWT or the admin token → 403; the order stays PENDING', async () => {
    const { orderId, token } = await buy('pay-auth');
    const body = { paymentId: `p-${run}`, amount: PRICE };
    const none = await internal('POST', paymentPath(orderId), { json: body });
    expect(none.status).toBe(401);
    expect(none.body).toEqual({ error: 'TOKEN_MISSING' });
    for (const credential of ['wrong-payment-service-token', token, config.ADMIN_TOKEN]) {
      const reply = await internal('POST', paymentPath(orderId), { token: credential, json: body });
      expect(reply.status).toBe(403);
      expect(reply.body).toEqual({ error: 'FORBIDDEN' });
    }
    await persisted(orderId);
    expect((await orderRow(clients.pool, orderId))?.status).toBe('PENDING');
  });

  test('bad bodies → 400 INVALID_BODY and the order stays payable', async () => {
    const { orderId, token } = await buy('pay-body');
    const bad: [string, { json?: unknown; body?: string; headers?: Record<string, string> }][] = [
      ['empty object', { json: {} }],
      ['no amount', { json: { paymentId: 'p1' } }],
      ['empty paymentId', { json: { paymentId: '', amount: PRICE } }],
      ['paymentId too long', { json: { paymentId: 'p'.repeat(201), amount: PRICE } }],
      ['paymentId with a NUL byte', { json: { paymentId: 'p\u0000', amount: PRICE } }],
      ['paymentId with a line break', { json: { paymentId: 'p\n1', amount: PRICE } }],
      ['fractional amount', { json: { paymentId: 'p1', amount: 19.99 } }],
      ['amount as a string', { json: { paymentId: 'p1', amount: String(PRICE) } }],
      ['negative amount', { json: { paymentId: 'p1', amount: -1 } }],
      ['unknown field', { json: { paymentId: 'p1', amount: PRICE, orderId } }],
      ['an array', { json: [{ paymentId: 'p1', amount: PRICE }] }],
      ['broken JSON', { body: '{"paymentId": "p1", ', headers: { 'content-type': 'application/json' } }],
      ['gzip declared, not gzip', { body: '{"paymentId": "p1"}', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } }],
      ['brotli declared, not brotli', { body: 'garbage', headers: { 'content-type': 'application/json', 'content-encoding': 'br' } }],
    ];
    for (const [name, options] of bad) {
      const reply = await internal('POST', paymentPath(orderId), { token: service, ...options });
      expect({ name, status: reply.status, error: reply.body.error }).toEqual({ name, status: 400, error: 'INVALID_BODY' });
    }
    const paid = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `ok-${run}`, amount: PRICE } });
    expect(paid.status).toBe(200);
    expect(paid.body).toEqual({ orderId, status: 'PAID', paymentId: `ok-${run}` });
    const view = await call('GET', orderPath(orderId), { token });
    expect(view.status).toBe(200);
  });

  test('an unknown order → 404 ORDER_NOT_FOUND; a malformed id → 404', async () => {
    const unknown = await internal('POST', paymentPath(randomUUID()), { token: service, json: { paymentId: 'p', amount: PRICE } });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'ORDER_NOT_FOUND' });
    const malformed = await internal('POST', paymentPath('nope'), { token: service, json: { paymentId: 'p', amount: PRICE } });
    expect(malformed.status).toBe(404);
    expect(malformed.body).toEqual({ error: 'ORDER_NOT_FOUND' });
  });

  test('happy path: 200 PAID, GET shows PAID; same paymentId again → 200; another paymentId → 409 ORDER_NOT_PENDING', async () => {
    const { orderId, token } = await buy('pay-happy');
    const paymentId = `pay-${run}-1`;
    const paid = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId, amount: PRICE } });
    expect(paid.status).toBe(200);
    expect(paid.body).toEqual({ orderId, status: 'PAID', paymentId });

    await eventually(async () => {
      const view = await call('GET', orderPath(orderId), { token });
      expect(view.status).toBe(200);
      expect(view.body).toMatchObject({ orderId, status: 'PAID', paymentId });
    });

    const again = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId, amount: PRICE } });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ orderId, status: 'PAID', paymentId });
    const second = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `pay-${run}-2`, amount: PRICE } });
    expect(second.status).toBe(409);
    expect(second.body).toEqual({ error: 'ORDER_NOT_PENDING', orderId });

    // Once the workflow has ended, PostgreSQL answers the same way.
    await orderResult(temporal, orderId);
    const afterEnd = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `pay-${run}-3`, amount: PRICE } });
    expect(afterEnd.status).toBe(409);
    expect(afterEnd.body).toEqual({ error: 'ORDER_NOT_PENDING', orderId });
    const replay = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId, amount: PRICE } });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual({ orderId, status: 'PAID', paymentId });
    expect(await orderRow(clients.pool, orderId)).toMatchObject({ status: 'PAID', paymentId });
  });

  test('wrong amount → 422 AMOUNT_MISMATCH and nothing changes; the right amount then pays; its paymentId again with a wrong amount → 422', async () => {
    const { orderId } = await buy('pay-amount');
    for (const amount of [PRICE - 1, PRICE + 1, 0]) {
      const reply = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `wrong-${amount}-${run}`, amount } });
      expect(reply.status).toBe(422);
      expect(reply.body).toEqual({ error: 'AMOUNT_MISMATCH', orderId });
    }
    await persisted(orderId);
    expect(await orderRow(clients.pool, orderId)).toMatchObject({ status: 'PENDING', paymentId: null });
    const paid = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `right-${run}`, amount: PRICE } });
    expect(paid.status).toBe(200);
    expect(paid.body).toEqual({ orderId, status: 'PAID', paymentId: `right-${run}` });
    // A retry is the same payment only with the same amount: another amount under its id is not a replay.
    const misreplayed = await internal('POST', paymentPath(orderId), { token: service, json: { paymentId: `right-${run}`, amount: PRICE + 1 } });
    expect(misreplayed.status).toBe(422);
    expect(misreplayed.body).toEqual({ error: 'AMOUNT_MISMATCH', orderId });
  });
});

test('an order id naming a sale that does not exist → 404 ORDER_NOT_FOUND on every route taking one, and no warning or error logged', async () => {
  const lines: string[] = [];
  const log = pino(
    { level: 'warn' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );
  const api = await startApi(testConfig(), log);
  try {
    const [publicDoor, internalDoor] = [http(api.url), http(api.internalUrl)];
    const buyer = await buyerToken(config, `no-sale-${run}`);
    // The id (sale 2147483647), and one of a random sale id far above any made.
    for (const orderId of ['7fffffff-0000-8000-8000-000000000000', newOrderId(randomInt(2 ** 30, 2 ** 31 - 1))]) {
      const answers = [
        await publicDoor('GET', orderPath(orderId), { token: buyer }),
        await internalDoor('POST', paymentPath(orderId), { token: service, json: { paymentId: `no-sale-${run}`, amount: PRICE } }),
        await publicDoor('POST', `/api/dev/orders/${orderId}/payment`, { token: buyer }),
      ];
      expect(answers.map((a) => [a.status, a.body])).toEqual(answers.map(() => [404, { error: 'ORDER_NOT_FOUND' }]));
    }
    expect(lines).toEqual([]);
  } finally {
    await api.close();
  }
});
