/**
 * End to end over HTTP on the real stack: the API (startApi) and the production worker (startWorker) in this
 * process, the dev server, PostgreSQL, Redis and Kafka. Three buyers purchase, one pays through the payment
 * route, two let the 3-second window pass; the buyer's GET, PostgreSQL, Redis, Kafka and the operators' view
 * (`temporal workflow list --query "SaleId = N"`, the CLI an operator would use) must all tell the same story.
 * Visibility is eventually consistent, so the listing is polled until it agrees or a deadline passes.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Client } from '@temporalio/client';
import type { RunningApi } from '../../src/api/main';
import type { Order } from '../../src/order/types';
import { saleKeys } from '../../src/reservation/layout';
import { buyerToken, eventually, createTestSale, orderResult, testConfig, type Clients } from '../support/helpers';
import { countByType, uniqueEvents, type EventTap } from '../support/kafka';
import { useWorkflowHarness } from '../support/workflowHarness';

const TEMPORAL_CLI = join(__dirname, '..', '..', '.local', 'venv', 'bin', 'temporal');
const PRICE = 4200;
const QUANTITY = 5;
const WINDOW_MS = 3000;

const config = testConfig();
const harness = useWorkflowHarness(config, { api: true });
let clients: Clients;
let api: RunningApi;
let temporal: Client;
let tap: EventTap;
beforeAll(() => ({ clients, temporal, tap, api } = harness));

interface Listed {
  workflowId: string;
  status: string;
  attributes: Record<string, unknown>;
}

/** `temporal workflow list` as an operator runs it; search attribute payloads decoded from JSON. */
async function listWorkflows(query: string): Promise<Listed[]> {
  const { stdout } = await promisify(execFile)(TEMPORAL_CLI, [
    'workflow',
    'list',
    '--address',
    `${config.TEMPORAL_HOST}:${config.TEMPORAL_PORT}`,
    '--namespace',
    config.TEMPORAL_NAMESPACE,
    '--query',
    query,
    '--output',
    'json',
  ]);
  const rows = JSON.parse(stdout || '[]') as {
    execution: { workflowId: string };
    status: string;
    searchAttributes?: { indexedFields?: Record<string, { data: string }> };
  }[];
  return rows.map((row) => ({
    workflowId: row.execution.workflowId,
    status: row.status,
    attributes: Object.fromEntries(
      Object.entries(row.searchAttributes?.indexedFields ?? {}).map(([name, payload]) => [name, JSON.parse(Buffer.from(payload.data, 'base64').toString('utf8'))]),
    ),
  }));
}

/** Polls until check passes (it throws while not), or rethrows its last failure at the deadline. */

/** A request to the API: the payment route on its internal door, the buyers' routes on its public one. */
async function call(method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const door = path.endsWith('/payment') ? api.internalUrl : api.url;
  const res = await fetch(`${door}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

test('three purchases, one paid, two expired: HTTP, PostgreSQL, Redis, Kafka and visibility agree', async () => {
  const sale = await createTestSale(clients, { quantities: [QUANTITY], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const itemId = sale.items[0].itemId;
  const run = randomUUID().slice(0, 8);
  const buyers = [0, 1, 2].map((i) => `e2e-${run}-${i}`);
  const tokens = await Promise.all(buyers.map((buyer) => buyerToken(config, buyer)));

  const purchases = await Promise.all(tokens.map((token) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, token)));
  for (const purchase of purchases) {
    expect(purchase).toEqual({ status: 202, body: { orderId: expect.any(String), status: 'PENDING', paymentDeadline: expect.any(String) } });
  }
  const orderIds = purchases.map((p) => p.body.orderId as string);
  const [paidId, ...expiringIds] = orderIds;
  const payment = { paymentId: `pay-${paidId}`, amount: PRICE };

  const paid = await call('POST', `/api/flash-sales/orders/${paidId}/payment`, config.PAYMENT_SERVICE_TOKEN, payment);
  expect(paid).toEqual({ status: 200, body: { orderId: paidId, status: 'PAID', paymentId: payment.paymentId } });

  // The operators' view: all three, with the attributes the starter set.
  const listed = await eventually(async () => {
    const rows = await listWorkflows(`SaleId = ${sale.saleId}`);
    expect(rows.map((r) => r.workflowId).sort()).toEqual([...orderIds].sort());
    return rows;
  });
  for (const row of listed) {
    const buyer = buyers[orderIds.indexOf(row.workflowId)];
    expect(row.attributes).toMatchObject({ SaleId: sale.saleId, ItemId: itemId, UserId: buyer });
    expect(['PENDING', 'PAID', 'EXPIRED']).toContain(row.attributes.OrderStatus);
  }

  const results: Order[] = await Promise.all(orderIds.map((id) => orderResult(temporal, id)));
  expect(results.map((r) => r.status)).toEqual(['PAID', 'EXPIRED', 'EXPIRED']);

  // The buyers' view over HTTP: each sees their own order, final.
  const views = await Promise.all(orderIds.map((id, i) => call('GET', `/api/flash-sales/orders/${id}`, tokens[i])));
  expect(views[0]).toMatchObject({ status: 200, body: { orderId: paidId, status: 'PAID', paymentId: payment.paymentId, priceMinor: PRICE } });
  for (const [i, id] of expiringIds.entries()) {
    expect(views[i + 1]).toMatchObject({ status: 200, body: { orderId: id, status: 'EXPIRED', itemId, saleId: sale.saleId } });
    expect(views[i + 1].body).not.toHaveProperty('paymentId');
  }
  expect(await call('GET', `/api/flash-sales/orders/${paidId}`, tokens[1])).toEqual({ status: 404, body: { error: 'ORDER_NOT_FOUND' } });

  // PostgreSQL, the truth.
  const rows = await clients.pool.query<{ id: string; status: string; payment_id: string | null; user_id: string }>(
    'SELECT id, status, payment_id, user_id FROM orders WHERE sale_id = $1',
    [sale.saleId],
  );
  const byId = new Map(rows.rows.map((r) => [r.id, r]));
  expect(rows.rowCount).toBe(3);
  expect(byId.get(paidId)).toMatchObject({ status: 'PAID', payment_id: payment.paymentId, user_id: buyers[0] });
  for (const id of expiringIds) expect(byId.get(id)).toMatchObject({ status: 'EXPIRED', payment_id: null });
  // One unit sold: the paid order is the item's one live order, holding its unit.
  const live = await clients.pool.query<{ id: string; unit: number }>(`SELECT id, unit FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`, [itemId]);
  expect(live.rows).toEqual([{ id: paidId, unit: expect.any(Number) }]);

  // Redis: the paid unit stays reserved (the unit PostgreSQL holds for it), the two others are back (I2).
  expect((await clients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(QUANTITY - 1);
  expect((await clients.store.view.reservations(sale.saleId)).map((r) => [r.orderId, r.unit])).toEqual([[paidId, live.rows[0].unit]]);
  expect(await clients.redis.hgetall(saleKeys(sale.saleId).buyers)).toEqual({ [buyers[0]]: paidId });

  // Kafka, after dropping redelivered copies by eventId.
  const events = uniqueEvents(
    await tap.collect(orderIds, { until: (es) => new Set(es.filter((e) => e.type !== 'OrderPlaced').map((e) => e.orderId)).size === 3 }),
  );
  expect(countByType(events)).toEqual({ OrderPlaced: 3, OrderPaid: 1, OrderExpired: 2 });
  expect(events.find((e) => e.type === 'OrderPaid')).toMatchObject({ orderId: paidId, paymentId: payment.paymentId, amount: PRICE });
  expect(events.filter((e) => e.type === 'OrderExpired').map((e) => e.orderId).sort()).toEqual([...expiringIds].sort());

  // The operators' view once settled: final statuses in the OrderStatus search attribute.
  await eventually(async () => {
    const settled = await listWorkflows(`SaleId = ${sale.saleId} AND ExecutionStatus = 'Completed'`);
    expect(Object.fromEntries(settled.map((r) => [r.workflowId, r.attributes.OrderStatus]))).toEqual({
      [paidId]: 'PAID',
      [expiringIds[0]]: 'EXPIRED',
      [expiringIds[1]]: 'EXPIRED',
    });
  });
  const expired = await listWorkflows(`SaleId = ${sale.saleId} AND OrderStatus = 'EXPIRED'`);
  expect(expired.map((r) => r.workflowId).sort()).toEqual([...expiringIds].sort());
});
