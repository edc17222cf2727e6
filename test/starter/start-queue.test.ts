/**
 * Acceptance on Redis, workflows from the start queue (I4), against the real Redis, PostgreSQL, Kafka and
 * Temporal: a 202 rests on the reservation and its start queue entry (reserve.lua writes both), and the API's
 * starter starts each order's workflow afterwards. Temporal cut off does not reach the purchase route; an API
 * process killed with entries in hand leaves them to another; a Redis killed right after its 202s keeps them
 * (AOF, fsync always); an order is the buyer's, readable and payable, before its workflow exists; the
 * deadline shown is the one enforced. Each sale is audited once settled.
 * Only the APIs a test starts run a starter here, and they stop with the test, so each test knows which
 * starter takes its entries. A starter of its own process holds its starts while another process's API accepts
 * a stampede (the start queues' counts, src/starter/gates.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import pino from 'pino';
import { startApi, type RunningApi } from '../../src/api/main';
import { startChild } from '../support/processes';
import { claimMember } from '../../src/reservation/formats';
import { saleKeys, shardKeys } from '../../src/reservation/layout';
import { STARTER_GROUP, StartQueue } from '../../src/reservation/startQueue';
import { createStarter } from '../../src/starter/create';
import { PACE_WINDOW_MS } from '../../src/starter/pacing';
import { newOrderId } from '../../src/order/orderId';
import { OrderWorkflows, startOrderWorkflow } from '../../src/workflows/client';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker } from '../../src/worker/main';
import { bounded, buyerToken, type Clients, connectClients, createTestSale, freePort, NO_RATE_LIMITS, orderResult, orderRow, reserveUnit, settledAudit, testConfig, until } from '../support/helpers';
import { countByType, uniqueEvents, type EventTap } from '../support/kafka';
import { http, type ApiReply } from '../support/openapi';
import { openRelay, type Relay } from '../support/relay';
import { useWorkflowHarness } from '../support/workflowHarness';

const config = testConfig();
const harness = useWorkflowHarness(config, { api: false });
let clients: Clients;
let temporal: Client;
let tap: EventTap;
beforeAll(() => ({ clients, temporal, tap } = harness));
const run = randomUUID().slice(0, 8);
// What a test started (APIs, relays, servers) stops when the test ends, so no starter outlives its test.
const toClose: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of toClose.splice(0).reverse()) await close().catch(() => undefined);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * An API on this suite's task queue (so the harness's worker runs its workflows), closed after the suite.
 * @returns it, with `call` to its public door and `internal` to its internal one (payments, /metrics)
 */
async function api(overrides: Record<string, string> = {}): Promise<RunningApi & { call: ReturnType<typeof http>; internal: ReturnType<typeof http> }> {
  const running = await startApi(testConfig({ TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE, ...overrides }));
  toClose.push(() => running.close());
  return { ...running, call: http(running.url), internal: http(running.internalUrl) };
}

async function relayToTemporal(): Promise<Relay> {
  const relay = await openRelay(config.TEMPORAL_HOST, config.TEMPORAL_PORT);
  toClose.push(() => relay.close());
  return relay;
}

function statusCounts(replies: ApiReply[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const r of replies) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
}

async function crowd(call: ReturnType<typeof http>, itemId: number, prefix: string, buyers: number, limit = 50): Promise<ApiReply[]> {
  const tokens = await Promise.all(Array.from({ length: buyers }, (_, i) => buyerToken(config, `${prefix}-${run}-${i}`)));
  return bounded(
    limit,
    tokens.map((token) => () => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token })),
  );
}

const acceptedIds = (replies: ApiReply[]) => replies.filter((r) => r.status === 202).map((r) => r.body.orderId as string);

/** @param internal calls to an API's internal door */
async function metric(internal: ReturnType<typeof http>, pattern: RegExp): Promise<number> {
  const match = pattern.exec((await internal('GET', '/metrics')).text);
  return match ? Number(match[1]) : 0;
}

test('1,000 buyers race for 100 units: exactly 100 × 202 and 900 × 410; every 202 gets its workflow, which ends once paid; the audit passes', async () => {
  const { call, internal } = await api();
  // The window outlasts the race: an order that expired mid-race returns its unit, which a later buyer may
  // rightly buy (a 3 s window gave 111 × 202 on a loaded CI machine). The orders are paid to end them.
  const sale = await createTestSale(clients, { quantities: [100], paymentWindowMs: 60_000, priceMinor: 1500 });
  const replies = await crowd(call, sale.items[0].itemId, 'race', 1000, 100);
  expect(statusCounts(replies)).toEqual({ 202: 100, 410: 900 });
  const accepted = acceptedIds(replies);
  expect(new Set(accepted).size).toBe(100);
  const payments = await bounded(
    10,
    accepted.map((orderId) => () => internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${orderId}`, amount: 1500 } })),
  );
  expect(payments.map((r) => [r.status, r.body.status])).toEqual(accepted.map(() => [200, 'PAID']));
  expect(await settledAudit(config, clients, temporal, sale.saleId, accepted)).toEqual([]);
  const { rows } = await clients.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [sale.saleId]);
  expect(Object.fromEntries(rows.map((r) => [r.status, r.n]))).toEqual({ PAID: 100 });
}, 120_000);

test('Temporal cut off for 30 s during a sale: 202 until sold out and 410 after, no 5xx; orders read and paid meanwhile; when Temporal returns every order gets its workflow and ends; the audit passes', async () => {
  const relay = await relayToTemporal();
  const { call, internal } = await api({ TEMPORAL_PORT: String(relay.port), TEMPORAL_CALL_TIMEOUT_MS: '2000', STARTER_CLAIM_IDLE_MS: '5000' });
  const sale = await createTestSale(clients, { quantities: [40], paymentWindowMs: 20_000, priceMinor: 1500 });
  const itemId = sale.items[0].itemId;
  await relay.cut();
  const cutAt = Date.now();

  const first = await crowd(call, itemId, 'cut', 100, 20);
  expect(statusCounts(first)).toEqual({ 202: 40, 410: 60 });
  const accepted = acceptedIds(first);
  // The orders are the buyers' while no workflow can start: readable, and payable in PostgreSQL.
  const buyerOf = (orderId: string) => `cut-${run}-${first.findIndex((r) => r.body.orderId === orderId)}`;
  for (const orderId of accepted.slice(0, 5)) {
    const view = await call('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, buyerOf(orderId)) });
    expect(view.status).toBe(200);
    expect(view.body).toMatchObject({ orderId, status: 'PENDING', priceMinor: 1500, paymentDeadline: first.find((r) => r.body.orderId === orderId)?.body.paymentDeadline });
  }
  const paid = accepted.slice(0, 10);
  for (const orderId of paid) {
    const reply = await internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${orderId}`, amount: 1500 } });
    expect([reply.status, reply.body.status]).toEqual([200, 'PAID']);
  }
  // The starter has tried meanwhile: its starts fail against the cut, and the orders wait in the queue.
  const startFailures = async () =>
    [...(await internal('GET', '/metrics')).text.matchAll(/^flash_sale_workflow_start_failures_total\{cause="(unavailable|deadline_exceeded)"\} (\d+)$/gm)].reduce((n, m) => n + Number(m[2]), 0);
  await until('a start failed against the cut', async () => (await startFailures()) > 0 || undefined, 30_000);
  const later = await crowd(call, itemId, 'cut-late', 30, 10);
  expect(statusCounts(later)).toEqual({ 410: 30 });
  expect(await metric(internal, new RegExp(`^flash_sale_start_queue_waiting\\{sale_id="${sale.saleId}"\\} (\\d+)$`, 'm'))).toBe(40);
  expect(await temporal.workflow.count(`SaleId = ${sale.saleId}`)).toMatchObject({ count: 0 });

  await sleep(Math.max(0, cutAt + 30_000 - Date.now()));
  await relay.restore();
  expect(await settledAudit(config, clients, temporal, sale.saleId, accepted)).toEqual([]);
  const { rows } = await clients.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [sale.saleId]);
  expect(Object.fromEntries(rows.map((r) => [r.status, r.n]))).toEqual({ PAID: 10, EXPIRED: 30 });
}, 150_000);

test('an API process SIGKILLed while its starter holds unstarted entries: another API process starts them, each order once, and they end', async () => {
  const relay = await relayToTemporal();
  const port = await freePort();
  const env = {
    ...process.env,
    API_PORT: String(port),
    INTERNAL_API_PORT: '0',
    LOG_LEVEL: 'info',
    TEMPORAL_PORT: String(relay.port),
    TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE,
    TEMPORAL_CALL_TIMEOUT_MS: '3000',
    STARTER_CLAIM_IDLE_MS: '4000',
    // As the suite's own API (testConfig): its crowd buys without the gate, from one IP.
    SALE_GATE_REQUIRED: String(config.SALE_GATE_REQUIRED),
    ...NO_RATE_LIMITS,
  };
  const doomed = startChild('doomed api', 'dist/api/main.js', env, join(mkdtempSync(join(tmpdir(), 'start-queue-')), 'api.log'), 'api listening');
  toClose.push(() => doomed.stop());
  await doomed.ready;
  relay.freeze();
  const sale = await createTestSale(clients, { quantities: [20], paymentWindowMs: 2000 });
  const replies = await crowd(http(`http://127.0.0.1:${port}`), sale.items[0].itemId, 'doomed', 20, 10);
  const accepted = acceptedIds(replies);
  expect(accepted).toHaveLength(20);
  const key = saleKeys(sale.saleId).startQueue;
  // Every entry has been delivered to the doomed starter, whose starts hang on the frozen relay.
  await until('20 entries pending with the doomed starter', async () => {
    const summary = (await clients.redis.xpending(key, STARTER_GROUP).catch(() => [0])) as [number];
    return summary[0] === 20;
  });

  doomed.process.kill('SIGKILL');
  await once(doomed.process, 'exit');
  const survivor = await api({ TEMPORAL_CALL_TIMEOUT_MS: '3000', STARTER_CLAIM_IDLE_MS: '4000' });
  expect(await settledAudit(config, clients, temporal, sale.saleId, accepted)).toEqual([]);
  expect(await metric(survivor.internal, /^flash_sale_workflow_starts_total\{result="started"\} (\d+)$/m)).toBe(20);
  const executions: string[] = [];
  for await (const wf of temporal.workflow.list({ query: `SaleId = ${sale.saleId}` })) executions.push(wf.workflowId);
  expect(executions.sort()).toEqual([...accepted].sort());
  expect(await clients.redis.xlen(key)).toBe(0);
}, 120_000);

test('a start whose answer never came back counts as done: the next start finds the workflow (already_started), and the entry leaves the queue', async () => {
  const sale = await createTestSale(clients, { quantities: [3], paymentWindowMs: 2000 });
  const order = {
    orderId: newOrderId(sale.saleId),
    saleId: sale.saleId,
    itemId: sale.items[0].itemId,
    userId: `lost-answer-${run}`,
    priceMinor: sale.items[0].priceMinor,
    paymentWindowMs: 2000,
    reservedAtMs: Date.now(),
  };
  const held = await reserveUnit(clients, order);
  // The workflow exists already (as after a start that reached Temporal and whose answer was lost).
  await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, held);

  const { internal } = await api();
  await until('the entry acknowledged', async () => (await clients.redis.xlen(saleKeys(sale.saleId).startQueue)) === 0);
  expect(await metric(internal, /^flash_sale_workflow_starts_total\{result="already_started"\} (\d+)$/m)).toBe(1);
  expect(await settledAudit(config, clients, temporal, sale.saleId, [order.orderId])).toEqual([]);
});

test('an entry no starter can start (no unit in its terms: a previous version wrote it) is set aside once, and the orders around it start', async () => {
  const sale = await createTestSale(clients, { quantities: [3], paymentWindowMs: 60_000 });
  const keys = saleKeys(sale.saleId);
  const terms = (userId: string) => `${sale.items[0].itemId}|${userId}|${Date.now()}|${sale.items[0].priceMinor}|60000`;
  const poison = await clients.redis.xadd(keys.startQueue, '*', 'orderId', randomUUID(), 'terms', terms(`old-format-${run}`));
  const order = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId: sale.items[0].itemId, userId: `after-poison-${run}`, priceMinor: sale.items[0].priceMinor, paymentWindowMs: 60_000, reservedAtMs: Date.now() };
  await reserveUnit(clients, order);

  await api();
  await until('the queue emptied', async () => (await clients.redis.xlen(keys.startQueue)) === 0);
  const aside = await clients.redis.xrange(`${keys.startQueue}:invalid`, '-', '+');
  expect(aside.map(([, fields]) => fields.slice(0, 4))).toEqual([['entryId', poison, 'orderId', expect.any(String)]]);
  expect(await clients.redis.xpending(keys.startQueue, STARTER_GROUP)).toEqual([0, null, null, null]);
  // The valid order behind it started (this process's metrics also count other sales' leftovers: not read here).
  await temporal.workflow.getHandle(order.orderId).describe();
  await clients.redis.del(`${keys.startQueue}:invalid`);
});

describe('a private Redis with AOF and appendfsync always, SIGKILLed right after its 202s', () => {
  let redisServer: ChildProcess | undefined;
  let port: number;
  let dir: string;

  async function startRedis(): Promise<void> {
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''],
      { stdio: 'ignore' },
    );
    redisServer = child;
    const probe = connectClients(testConfig({ REDIS_PORT: String(port) }));
    probe.redis.on('error', () => undefined);
    try {
      await until('the private redis-server to answer', () => probe.redis.ping().then(() => true, () => false), 10_000);
    } finally {
      await probe.close();
    }
  }

  beforeAll(async () => {
    port = await freePort();
    dir = mkdtempSync(join(tmpdir(), 'start-queue-redis-'));
    await startRedis();
    toClose.push(async () => redisServer?.kill('SIGKILL'));
  });

  test('restarted, it holds all N reservations and queue entries, and all N orders end', async () => {
    const privateConfig = testConfig({ REDIS_PORT: String(port) });
    const privateClients = connectClients(privateConfig);
    privateClients.redis.on('error', () => undefined);
    toClose.push(() => privateClients.close());
    const worker = await startWorker(privateConfig, await buildWorkflowBundle());
    toClose.push(() => worker.shutdown());
    const relay = await relayToTemporal();
    const running = await startApi({ ...privateConfig, TEMPORAL_PORT: relay.port, TEMPORAL_CALL_TIMEOUT_MS: 2000 });
    toClose.push(() => running.close());
    relay.freeze();

    const sale = await createTestSale(privateClients, { quantities: [25], paymentWindowMs: 3000 });
    const itemId = sale.items[0].itemId;
    const replies = await crowd(http(running.url), itemId, 'aof', 15, 15);
    const accepted = acceptedIds(replies);
    expect(accepted).toHaveLength(15);

    redisServer?.kill('SIGKILL');
    await once(redisServer as ChildProcess, 'exit');
    await startRedis();
    const keys = saleKeys(sale.saleId);
    expect((await privateClients.redis.hkeys(keys.reservations)).sort()).toEqual([...accepted].sort());
    expect(await privateClients.redis.hlen(keys.buyers)).toBe(15);
    const entries = (await privateClients.redis.xrange(keys.startQueue, '-', '+')).map(([, fields]) => fields[fields.indexOf('orderId') + 1]);
    expect(entries.sort()).toEqual([...accepted].sort());
    expect((await privateClients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(10);

    relay.thaw();
    expect(await settledAudit(privateConfig, privateClients, temporal, sale.saleId, accepted)).toEqual([]);
    expect((await privateClients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(25);
  }, 120_000);
});

test('before its workflow exists, an accepted order is the buyer’s: GET answers PENDING with the 202’s deadline, a wrong amount changes nothing, the payment route takes the payment; the workflow then ends PAID', async () => {
  const relay = await relayToTemporal();
  const { call, internal } = await api({ TEMPORAL_PORT: String(relay.port), TEMPORAL_CALL_TIMEOUT_MS: '2000' });
  relay.freeze();
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: 1234, paymentWindowMs: 60_000 });
  const token = await buyerToken(config, `early-${run}`);
  const accepted = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token });
  expect(accepted.status).toBe(202);
  const orderId = accepted.body.orderId as string;
  const paymentPath = `/api/flash-sales/orders/${orderId}/payment`;

  const view = await call('GET', `/api/flash-sales/orders/${orderId}`, { token });
  expect(view.body).toEqual({ orderId, saleId: sale.saleId, itemId: sale.items[0].itemId, userId: `early-${run}`, status: 'PENDING', priceMinor: 1234, paymentDeadline: accepted.body.paymentDeadline });
  await expect(temporal.workflow.getHandle(orderId).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);

  const wrong = await internal('POST', paymentPath, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `p-${run}`, amount: 1233 } });
  expect([wrong.status, wrong.body]).toEqual([422, { error: 'AMOUNT_MISMATCH', orderId }]);
  expect(await orderRow(clients.pool, orderId)).toBeUndefined();

  const paid = await internal('POST', paymentPath, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `p-${run}`, amount: 1234 } });
  expect([paid.status, paid.body]).toEqual([200, { orderId, status: 'PAID', paymentId: `p-${run}` }]);
  expect((await call('GET', `/api/flash-sales/orders/${orderId}`, { token })).body).toMatchObject({ status: 'PAID', paymentDeadline: accepted.body.paymentDeadline });

  relay.thaw();
  expect(await orderResult(temporal, orderId)).toMatchObject({ status: 'PAID', paymentId: `p-${run}`, paymentDeadline: accepted.body.paymentDeadline });
  expect(await settledAudit(config, clients, temporal, sale.saleId, [orderId])).toEqual([]);
  expect(countByType(uniqueEvents(await tap.collect([orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') })))).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
}, 60_000);

test('a workflow started but not yet run: the payment route pays the order the starter stored before the start; the workflow ends PAID in its first task', async () => {
  // This API's starter starts workflows on a task queue no worker polls until the payment is in.
  const idleQueue = `${config.TEMPORAL_TASK_QUEUE}-unrun-${run}`;
  const { call, internal } = await api({ TEMPORAL_TASK_QUEUE: idleQueue });
  const sale = await createTestSale(clients, { quantities: [1], priceMinor: 1234, paymentWindowMs: 60_000 });
  const token = await buyerToken(config, `unrun-${run}`);
  const accepted = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token });
  expect(accepted.status).toBe(202);
  const orderId = accepted.body.orderId as string;
  const handle = temporal.workflow.getHandle(orderId);
  await until('the workflow started', () => handle.describe().then(() => true, () => false));

  const paid = await internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `unrun-${run}`, amount: 1234 } });
  expect([paid.status, paid.body]).toEqual([200, { orderId, status: 'PAID', paymentId: `unrun-${run}` }]);
  expect((await orderRow(clients.pool, orderId))?.status).toBe('PAID');

  const worker = await startWorker(testConfig({ TEMPORAL_TASK_QUEUE: idleQueue }), await buildWorkflowBundle());
  toClose.push(() => worker.shutdown());
  expect(await orderResult(temporal, orderId)).toMatchObject({ status: 'PAID', paymentId: `unrun-${run}` });
  // The route paid a stored row, so it woke the workflow with one signal, which the first task saw already paid.
  const history = (await handle.fetchHistory()).events ?? [];
  expect(history.filter((e) => e.workflowExecutionSignaledEventAttributes)).toHaveLength(1);
  expect(history.filter((e) => e.workflowTaskCompletedEventAttributes)).toHaveLength(1);
  expect(await settledAudit(config, clients, temporal, sale.saleId, [orderId])).toEqual([]);
  expect(countByType(uniqueEvents(await tap.collect([orderId], { until: (es) => es.some((e) => e.type === 'OrderPaid') })))).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
}, 90_000);

test('the deadline shown is the one enforced: a payment 200 ms before it is accepted, one 200 ms after it is refused with PAYMENT_WINDOW_CLOSED; the taken payment sent again after the deadline is answered 200', async () => {
  const { call, internal } = await api();
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: 900, paymentWindowMs: 3000 });
  const replies = await crowd(call, sale.items[0].itemId, 'deadline', 2, 2);
  const [early, late] = replies.map((r) => ({ orderId: r.body.orderId as string, deadlineMs: Date.parse(r.body.paymentDeadline as string) }));
  const payAt = async (order: typeof early, atMs: number) => {
    await sleep(Math.max(0, atMs - Date.now()));
    return internal('POST', `/api/flash-sales/orders/${order.orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `p-${order.orderId}`, amount: 900 } });
  };
  const [before, after] = await Promise.all([payAt(early, early.deadlineMs - 200), payAt(late, late.deadlineMs + 200)]);
  expect([before.status, before.body.status]).toEqual([200, 'PAID']);
  expect([after.status, after.body]).toEqual([409, { error: 'PAYMENT_WINDOW_CLOSED', orderId: late.orderId }]);
  // The payment service's retry of a payment whose answer it lost (openapi.yaml): taken, so 200 again.
  const retried = await payAt(early, early.deadlineMs + 200);
  expect([retried.status, retried.body]).toEqual([200, { orderId: early.orderId, status: 'PAID', paymentId: `p-${early.orderId}` }]);
  expect(await settledAudit(config, clients, temporal, sale.saleId, [early.orderId, late.orderId])).toEqual([]);
  expect((await orderRow(clients.pool, early.orderId))?.status).toBe('PAID');
  expect((await orderRow(clients.pool, late.orderId))?.status).toBe('EXPIRED');
});

test('a stranded purchase claim is repaired within STARTER_CLAIM_IDLE_MS plus one period while the Temporal backlog is at its budget', async () => {
  // No worker polls this task queue: the first workflow task stays in the backlog, which holds the starter at its budget of 1.
  const idleMs = 3000;
  const noWorker = `test-no-worker-${randomUUID()}`;
  const { call, internal } = await api({ TEMPORAL_TASK_QUEUE: noWorker, STARTER_MAX_BACKLOG: '1', STARTER_CLAIM_IDLE_MS: String(idleMs), TEMPORAL_CALL_TIMEOUT_MS: '2000' });
  const sale = await createTestSale(clients, { quantities: [10] });
  const itemId = sale.items[0].itemId;
  const replies = await crowd(call, itemId, 'budget', 4, 1);
  expect(statusCounts(replies)).toEqual({ 202: 4 });
  toClose.push(() => Promise.allSettled(acceptedIds(replies).map((id) => temporal.workflow.getHandle(id).terminate('start-queue suite finished'))));
  await until('the backlog at its budget', async () => (await metric(internal, /^flash_sale_workflow_task_backlog (\d+)/m)) >= 1);

  // A purchase that claimed its buyer and died before it took a unit or undid the claim.
  const keys = (await clients.store.layouts.get(sale.saleId)).tags.map((tag) => shardKeys(tag))[0];
  const stranded = { orderId: randomUUID(), itemId, userId: `stranded-${run}` };
  const claimedAt = Date.now();
  expect(await clients.redis.claim(keys.buyers, keys.claims, keys.loaded, stranded.userId, stranded.orderId, claimMember(stranded))).toEqual(['CLAIMED', expect.any(Number), expect.any(String)]);

  // The backlog read all along: at 1 or more, the starter's budget of starts is 0 and it polls no sale's queue.
  const backlogSeen: number[] = [];
  await until(
    'the stranded claim undone',
    async () => {
      backlogSeen.push(await metric(internal, /^flash_sale_workflow_task_backlog (\d+)/m));
      return (await clients.redis.hget(keys.buyers, stranded.userId)) === null;
    },
    20_000,
  );
  const repairedAfterMs = Date.now() - claimedAt;
  expect(repairedAfterMs).toBeGreaterThanOrEqual(idleMs);
  expect(repairedAfterMs).toBeLessThanOrEqual(idleMs + idleMs / 2 + 1000);
  expect(await clients.redis.zcard(keys.claims)).toBe(0);
  expect(Math.min(...backlogSeen)).toBeGreaterThanOrEqual(1);
});

test('a starter of its own process waits while an API without one accepts a stampede, then starts every order; the queues count what was accepted, not what is left', async () => {
  const { call, internal } = await api({ STARTER_IN_API: 'false' });
  const starterConfig = testConfig({ TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE, STARTER_YIELD_ABOVE_PER_S: '50' });
  const workflows = await OrderWorkflows.connect(starterConfig);
  toClose.push(() => workflows.close());
  const startedAt: number[] = [];
  const noop = () => undefined;
  const starter = createStarter(starterConfig, { ...clients, workflows, log: pino({ level: 'silent' }) }, { onStarted: () => startedAt.push(Date.now()), onFailure: noop, onBacklog: noop, onReconciled: noop });
  starter.start();
  toClose.push(() => starter.stop());
  const units = 401;
  const sale = await createTestSale(clients, { quantities: [units], paymentWindowMs: 60_000, priceMinor: 1500 });
  const tokens = await Promise.all(Array.from({ length: units }, (_, i) => buyerToken(config, `apart-${run}-${i}`)));
  // A first buyer alone: once its order is started, the starter watches the sale; then a quiet second.
  const early = await call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token: tokens[0] });
  expect(early.status).toBe(202);
  await until('the first order started', async () => startedAt.length === 1, 30_000);
  await sleep(1000);
  // 200 presses a second for 2 s, each sent whether or not the last was answered: four times the gate's pace.
  const answeredAt: number[] = [];
  const presses: Promise<ApiReply>[] = [];
  for (const token of tokens.slice(1)) {
    presses.push(call('POST', `/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { token }).finally(() => answeredAt.push(Date.now())));
    await sleep(5);
  }
  const replies = [early, ...(await Promise.all(presses))];
  expect(statusCounts(replies)).toEqual({ 202: units });
  const [first, last] = [Math.min(...answeredAt), Math.max(...answeredAt)];
  expect(last - first).toBeGreaterThan(1500);
  // Two readings of the gate after the first 202 (an idle starter's opening window), then not one start.
  expect(startedAt.filter((t) => t > first + 3 * PACE_WINDOW_MS && t < last)).toEqual([]);
  await until(`${units} workflows started`, async () => startedAt.length >= units, 60_000);
  expect(await new StartQueue(clients.redis, clients.store.layouts).accepted(sale.saleId)).toBe(units);
  const accepted = acceptedIds(replies);
  await bounded(10, accepted.map((orderId) => () => internal('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `pay-${orderId}`, amount: 1500 } })));
  expect(await settledAudit(config, clients, temporal, sale.saleId, accepted)).toEqual([]);
}, 120_000);
