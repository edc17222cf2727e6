/**
 * Operator routes: /healthz (on both doors), /readyz (Redis, PostgreSQL, Temporal up), /metrics (purchase
 * outcomes counted by code, for exactly the answers this suite's API gave, and the start queue) on the internal
 * door, and /openapi.json (the repository's document on the internal door, its public paths on the public one).
 * Every response is checked against openapi.yaml.
 */
import { randomUUID } from 'node:crypto';
import { buyerToken, createTestSale, eventually, testConfig, type Clients } from '../support/helpers';
import { openApiDocument, type Http } from '../support/openapi';
import { useAppHarness } from '../support/apiHarness';

const config = testConfig();
const app = useAppHarness(config, 'ops');
const { accepted } = app;
let clients: Clients;
let call: Http;
let internal: Http;
beforeAll(() => ({ clients, call, internal } = app));
const run = randomUUID().slice(0, 8);


test('/healthz → 200 {"status":"ok"} on both doors', async () => {
  for (const door of [call, internal]) {
    const reply = await door('GET', '/healthz');
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({ status: 'ok' });
  }
});

test('/readyz → 200 with Redis, PostgreSQL and Temporal up', async () => {
  const reply = await internal('GET', '/readyz');
  expect(reply.status).toBe(200);
  expect(reply.body).toEqual({ status: 'ready', checks: { redis: 'up', postgres: 'up', temporal: 'up' } });
});

test('/metrics counts each purchase answer under its code', async () => {
  const sale = await createTestSale(clients, { quantities: [2] });
  const itemId = sale.items[0].itemId;
  const purchase = async (buyer: string, id: string | number = itemId) =>
    call('POST', `/api/flash-sales/items/${id}/purchase`, { token: await buyerToken(config, `${buyer}-${run}`) });

  const answers = [
    await purchase('a'), // 202 PENDING
    await purchase('a'), // 409 ALREADY_PURCHASED
    await purchase('b'), // 202 PENDING, last unit: the item is flagged sold out
    await purchase('c'), // 410 SOLD_OUT (from memory)
    await purchase('d'), // 410 SOLD_OUT
    await purchase('e', 'x1'), // 400 INVALID_ITEM_ID
    await purchase('f', 2147483647), // 404 ITEM_NOT_FOUND
    await call('POST', `/api/flash-sales/items/${itemId}/purchase`), // 401 TOKEN_MISSING
    await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: 'not-a-token' }), // 401 TOKEN_INVALID
    // JWT-shaped but forged, on the sold-out item: 410 before verification, counted as SOLD_OUT.
    await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: 'not.a.token' }),
  ];
  expect(answers.map((a) => a.status)).toEqual([202, 409, 202, 410, 410, 400, 404, 401, 401, 410]);
  accepted.push(...answers.filter((a) => a.status === 202).map((a) => a.body.orderId as string));

  const reply = await internal('GET', '/metrics');
  expect(reply.status).toBe(200);
  expect(reply.headers.get('content-type')).toMatch(/^text\/plain/);
  const counted = Object.fromEntries(
    [...reply.text.matchAll(/^flash_sale_purchase_outcomes_total\{code="([A-Z_]+)"\} (\d+)$/gm)].map((m) => [m[1], Number(m[2])]),
  );
  expect(counted).toEqual({ PENDING: 2, ALREADY_PURCHASED: 1, SOLD_OUT: 3, INVALID_ITEM_ID: 1, ITEM_NOT_FOUND: 1 });
  // The refused tokens apart from the series the alerts read.
  const unauthenticated = Object.fromEntries(
    [...reply.text.matchAll(/^flash_sale_unauthenticated_answers_total\{route="purchase",code="([A-Z_]+)"\} (\d+)$/gm)].map((m) => [m[1], Number(m[2])]),
  );
  expect(unauthenticated).toEqual({ TOKEN_MISSING: 1, TOKEN_INVALID: 1 });
  expect(reply.text).toMatch(/^flash_sale_reservations_total 2$/m);
  expect(reply.text).toMatch(/^flash_sale_sold_out_items 1$/m);
  expect(reply.text).toMatch(/^flash_sale_purchase_duration_seconds_count\{code="SOLD_OUT"\} 3$/m);

  // The starter started both orders' workflows: the sale's start queue is empty, its oldest entry age 0.
  await eventually(async () => {
    const text = (await internal('GET', '/metrics')).text;
    expect(text).toMatch(new RegExp(`^flash_sale_start_queue_waiting\\{sale_id="${sale.saleId}"\\} 0$`, 'm'));
    expect(text).toMatch(new RegExp(`^flash_sale_start_queue_oldest_age_seconds\\{sale_id="${sale.saleId}"\\} 0$`, 'm'));
    expect(Number(/^flash_sale_workflow_starts_total\{result="started"\} (\d+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(2);
  });
});

test('/openapi.json → the document in openapi.yaml on the internal door, without its x-door paths on the public one', async () => {
  const whole = await internal('GET', '/openapi.json');
  expect(whole.status).toBe(200);
  expect(whole.body).toEqual(openApiDocument);
  const shown = await call('GET', '/openapi.json');
  expect(shown.status).toBe(200);
  const paths = openApiDocument.paths as Record<string, { 'x-door'?: string }>;
  expect(shown.body).toEqual({ ...openApiDocument, paths: Object.fromEntries(Object.entries(paths).filter(([, item]) => item['x-door'] === undefined)) });
  expect(Object.keys(shown.body.paths as object)).not.toContain('/api/admin/sales');
  expect(Object.keys(shown.body.paths as object)).toContain('/api/flash-sales/items/{itemId}/purchase');
});
