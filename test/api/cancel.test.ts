/**
 * Cancels over HTTP and through the workflow, on the real stores, Temporal and Kafka (docs/design.md, "Cancel"):
 * a buyer cancels before the order's workflow exists and buys again at once; cancels race payments (routes and
 * updates, both orders of arrival) and the deadline, and exactly one wins each race; the payment service's
 * declined charge and an operator's cancel arrive from the Temporal CLI. The audit judges every sale.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { startApi, type RunningApi } from '../../src/api/main';
import type { CancelResult, PayResult } from '../../src/order/types';
import { shardKeys, tagOf } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { cancelUpdate, payUpdate } from '../../src/workflows/definitions';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { bounded, buyerToken, connectClients, createTestSale, orderResult, settledAudit, testConfig, until, type Clients } from '../support/helpers';
import { http, type Http } from '../support/openapi';
import { installTestRuntime } from '../support/temporalRuntime';

const PRICE = 1500;
const config = testConfig();
const run = randomUUID().slice(0, 8);
let clients: Clients;
let worker: RunningWorker;
let temporal: Client;
/** The API whose starter starts the workflows (the first test stops it for a while). */
let api: RunningApi | undefined;
let call: Http;
let internal: Http;

beforeAll(async () => {
  installTestRuntime();
  clients = connectClients(config);
  worker = await startWorker(config, await buildWorkflowBundle());
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  await api?.close();
  await temporal?.connection.close();
  await worker?.shutdown();
  await clients?.close();
});

async function startApiWith(starter: boolean): Promise<RunningApi> {
  const started = await startApi({ ...config, STARTER_IN_API: starter });
  call = http(started.url);
  internal = http(started.internalUrl);
  return started;
}

const purchasePath = (sale: Sale) => `/api/flash-sales/items/${sale.items[0].itemId}/purchase`;
const cancelPath = (orderId: string) => `/api/flash-sales/orders/${orderId}/cancel`;

async function press(sale: Sale, token: string): Promise<string> {
  const reply = await call('POST', purchasePath(sale), { token });
  expect(reply.status).toBe(202);
  return reply.body.orderId as string;
}

/** @returns the item's free units and returned-units count on its one stock shard */
async function stockOf(sale: Sale): Promise<{ free: number; returns: number }> {
  const keys = shardKeys(tagOf(await clients.store.layouts.get(sale.saleId), 0));
  const itemId = sale.items[0].itemId;
  const [free, returns] = await Promise.all([clients.redis.llen(keys.stock(itemId)), clients.redis.get(keys.returns(itemId))]);
  return { free, returns: Number(returns ?? 0) };
}

test('a cancel before the workflow exists (starter stopped): 200, the unit free at once, the next press 202; the workflow ends CANCELLED freeing nothing more', async () => {
  api = await startApiWith(false);
  const sale = await createTestSale(clients, { quantities: [1], priceMinor: PRICE });
  const token = await buyerToken(config, `early-${run}`);
  const before = await stockOf(sale);
  const first = await press(sale, token);
  expect(await temporal.workflow.count(`WorkflowId = "${first}"`)).toMatchObject({ count: 0 });
  expect((await call('POST', purchasePath(sale), { token: await buyerToken(config, `other-${run}`) })).status).toBe(410);

  const cancelled = await call('POST', cancelPath(first), { token });
  expect({ status: cancelled.status, body: cancelled.body }).toEqual({ status: 200, body: { orderId: first, status: 'CANCELLED', reason: 'BUYER' } });
  await until('the unit back in stock', async () => (await stockOf(sale)).free === 1, 1000);
  const afterCancel = await stockOf(sale);
  expect(afterCancel.returns).toBe(before.returns + 1);
  // Someone else's cancel is an unknown order's; a second cancel answers as the first.
  expect(await call('POST', cancelPath(first), { token: await buyerToken(config, `other-${run}`) })).toMatchObject({ status: 404, body: { error: 'ORDER_NOT_FOUND' } });
  expect((await call('POST', cancelPath(first), { token })).body).toEqual(cancelled.body);
  expect((await call('GET', `/api/flash-sales/orders/${first}`, { token })).body).toMatchObject({ status: 'CANCELLED', reason: 'BUYER' });
  const second = await press(sale, token);

  await api.close();
  api = await startApiWith(true);
  expect(await orderResult(temporal, first)).toMatchObject({ status: 'CANCELLED', reason: 'BUYER' });
  await until('the second order stored', async () => (await clients.orders.stored(second))?.status === 'PENDING');
  // The workflow's compensation found the unit given back already: no unit returned twice, the second order holds it.
  expect(await stockOf(sale)).toEqual({ free: 0, returns: afterCancel.returns });

  const operator = await internal('POST', `/api/admin/orders/${second}/cancel`, { token: config.ADMIN_TOKEN, json: { note: 'suite clean-up' } });
  expect(operator.body).toEqual({ orderId: second, status: 'CANCELLED', reason: 'OPERATOR' });
  expect(await orderResult(temporal, second)).toMatchObject({ status: 'CANCELLED', reason: 'OPERATOR' });
  expect(await settledAudit(config, clients, temporal, sale.saleId, [first, second])).toEqual([]);
}, 120_000);

/**
 * An update's answer, or, when the workflow closed before it took the update (the other sender's win ended it:
 * Temporal answers no update then, and it changed nothing), the route's answer, as a payment service would
 * fall back to it.
 */
async function viaUpdate<T>(update: () => Promise<T>, route: () => Promise<T>): Promise<T> {
  try {
    return await update();
  } catch (err) {
    const closed = err instanceof WorkflowNotFoundError || /closing workflow|already completed|unexpected workflow task failure/.test(`${(err as Error).message} ${(err as Error).cause}`);
    if (!closed) throw err;
    return route();
  }
}

test('200 orders, each with a cancel and a payment sent together (route and update, both orders of arrival): PAID xor CANCELLED, every answer agreeing', async () => {
  const count = 200;
  api ??= await startApiWith(true);
  const sale = await createTestSale(clients, { quantities: [count], priceMinor: PRICE });
  const buyers = await Promise.all(Array.from({ length: count }, (_, i) => buyerToken(config, `racer-${i}-${run}`)));
  const before = await stockOf(sale);
  const orderIds = await bounded(20, buyers.map((token) => () => press(sale, token)));
  await until('every workflow started', async () => (await temporal.workflow.count(`SaleId = ${sale.saleId}`)).count === count, 60_000);

  const answers = await bounded(
    20,
    orderIds.map((orderId, i) => async () => {
      const handle = temporal.workflow.getHandle(orderId);
      const payment = { paymentId: `pay-${orderId}`, amount: PRICE };
      const cancelRoute = () =>
        call('POST', cancelPath(orderId), { token: buyers[i] }).then((r) => (r.status === 200 ? { status: r.body.status, reason: r.body.reason } : { error: r.body.error }) as CancelResult);
      const payRoute = () =>
        internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: payment }).then(
          (r) => (r.status === 200 ? { status: 'PAID', paymentId: r.body.paymentId } : { error: r.body.error }) as PayResult,
        );
      // Even orders: cancel by the buyer's route, payment by update; odd: the reverse. Each pair in both orders.
      const cancel = (): Promise<CancelResult> => (i % 2 === 0 ? cancelRoute() : viaUpdate(() => handle.executeUpdate(cancelUpdate, { args: [{ reason: 'BUYER' }] }), cancelRoute));
      const pay = (): Promise<PayResult> => (i % 2 === 0 ? viaUpdate(() => handle.executeUpdate(payUpdate, { args: [payment] }), payRoute) : payRoute());
      const [c, p] = i % 4 < 2 ? await Promise.all([cancel(), pay()]) : await Promise.all([pay(), cancel()]).then(([pp, cc]) => [cc, pp] as const);
      return { orderId, cancel: c, pay: p };
    }),
  );
  const ends = await Promise.all(orderIds.map((id) => orderResult(temporal, id)));
  let cancelled = 0;
  for (const [i, end] of ends.entries()) {
    const { cancel, pay } = answers[i];
    if (end.status === 'CANCELLED') {
      cancelled++;
      expect({ cancel, pay }).toEqual({ cancel: { status: 'CANCELLED', reason: 'BUYER' }, pay: { error: 'ORDER_CANCELLED' } });
    } else {
      expect({ status: end.status, cancel, pay }).toEqual({ status: 'PAID', cancel: { error: 'ORDER_ALREADY_PAID' }, pay: { status: 'PAID', paymentId: `pay-${end.orderId}` } });
    }
  }
  // Units back exactly for the cancelled orders; both outcomes happened.
  expect(await stockOf(sale)).toEqual({ free: cancelled, returns: before.returns + cancelled });
  expect(cancelled).toBeGreaterThan(0);
  expect(cancelled).toBeLessThan(count);
  expect(await settledAudit(config, clients, temporal, sale.saleId, orderIds)).toEqual([]);
}, 240_000);

test('cancels at the deadline ± 30 ms: one final state per order, one unit back each, answers agreeing', async () => {
  const count = 24;
  const windowMs = 3000;
  api ??= await startApiWith(true);
  const sale = await createTestSale(clients, { quantities: [count], priceMinor: PRICE, paymentWindowMs: windowMs });
  const buyers = await Promise.all(Array.from({ length: count }, (_, i) => buyerToken(config, `late-${i}-${run}`)));
  const before = await stockOf(sale);
  const accepted = await Promise.all(buyers.map((token) => call('POST', purchasePath(sale), { token })));
  const answers = await Promise.all(
    accepted.map(async (reply, i) => {
      const at = Date.parse(reply.body.paymentDeadline as string) - 30 + (i % 13) * 5;
      await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now())));
      return call('POST', cancelPath(reply.body.orderId as string), { token: buyers[i] });
    }),
  );
  const orderIds = accepted.map((r) => r.body.orderId as string);
  const ends = await Promise.all(orderIds.map((id) => orderResult(temporal, id)));
  for (const [i, end] of ends.entries()) {
    const answer = answers[i];
    if (end.status === 'CANCELLED') expect(answer.status).toBe(200);
    else expect({ status: end.status, answer: answer.body.error }).toEqual({ status: 'EXPIRED', answer: 'PAYMENT_WINDOW_CLOSED' });
  }
  expect(await stockOf(sale)).toEqual({ free: count, returns: before.returns + count });
  expect(await settledAudit(config, clients, temporal, sale.saleId, orderIds)).toEqual([]);
}, 120_000);

test('a declined charge and an operator cancel sent from the Temporal CLI (update cancel): CANCELLED with their reasons', async () => {
  api ??= await startApiWith(true);
  const sale = await createTestSale(clients, { quantities: [3], priceMinor: PRICE });
  const before = await stockOf(sale);
  const [declined, fraud, refused] = await Promise.all(['declined', 'fraud', 'refused'].map(async (name) => press(sale, await buyerToken(config, `cli-${name}-${run}`))));
  await until('three workflows started', async () => (await temporal.workflow.count(`SaleId = ${sale.saleId}`)).count === 3, 30_000);
  const cli = (orderId: string, input: string) =>
    promisify(execFile)(join(__dirname, '..', '..', '.local', 'venv', 'bin', 'temporal'), [
      'workflow', 'update', 'execute', '--address', `${config.TEMPORAL_HOST}:${config.TEMPORAL_PORT}`, '--namespace', config.TEMPORAL_NAMESPACE,
      '--workflow-id', orderId, '--name', 'cancel', '--input', input, '--output', 'json',
    ]);
  await cli(declined, '{"reason":"PAYMENT_FAILED"}');
  await cli(fraud, '{"reason":"OPERATOR"}');
  // An unknown reason is refused by the update's validator: the CLI fails and the order stays PENDING.
  await expect(cli(refused, '{"reason":"WHIM"}')).rejects.toThrow(/INVALID_CANCEL|reason is one of/);
  expect(await orderResult(temporal, declined)).toMatchObject({ status: 'CANCELLED', reason: 'PAYMENT_FAILED' });
  expect(await orderResult(temporal, fraud)).toMatchObject({ status: 'CANCELLED', reason: 'OPERATOR' });
  expect((await clients.orders.stored(refused))?.status).toBe('PENDING');
  // The payment service's route for the same report: a cancelled order answers with the reason kept first.
  const report = await internal('POST', `/api/flash-sales/orders/${declined}/payment-failure`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${declined}` } });
  expect(report.body).toEqual({ orderId: declined, status: 'CANCELLED', reason: 'PAYMENT_FAILED' });
  const late = await internal('POST', `/api/flash-sales/orders/${refused}/payment-failure`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${refused}`, declineCode: 'insufficient_funds' } });
  expect(late.body).toEqual({ orderId: refused, status: 'CANCELLED', reason: 'PAYMENT_FAILED' });
  expect(await orderResult(temporal, refused)).toMatchObject({ status: 'CANCELLED', reason: 'PAYMENT_FAILED' });
  expect(await stockOf(sale)).toEqual({ free: 3, returns: before.returns + 3 });
  expect(await settledAudit(config, clients, temporal, sale.saleId, [declined, fraud, refused])).toEqual([]);
}, 120_000);
