/**
 * A payment for a stored order needs PostgreSQL only (I7's deadline rule is PostgreSQL's): the worker's Redis, a
 * server of this suite's own, is frozen (SIGSTOP) for 20 s while a `pay` update and a `paid` signal arrive for
 * two stored orders inside their payment window, and both orders end PAID. Before the workflow's payment step
 * passed the order's terms, Orders.pay read the reservation from Redis first: the step hung, the deadline
 * passed, and the payment sent in time was refused PAYMENT_WINDOW_CLOSED and refunded.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { OrderInput } from '../../src/order/types';
import { startOrderWorkflow } from '../../src/workflows/client';
import { paidSignal, payUpdate } from '../../src/workflows/definitions';
import { newOrderId } from '../../src/order/orderId';
import { type Clients, createTestSale, orderRow, reserveUnit, testConfig, until } from '../support/helpers';
import { startRedisServer, type RedisServer } from '../support/redisServer';
import { useWorkflowHarness } from '../support/workflowHarness';

const PRICE = 1500;
/** Long enough to store both orders first; short enough that the outage outlasts it. */
const WINDOW_MS = 12_000;
const OUTAGE_MS = 20_000;

const config = testConfig({ REDIS_DB: '0' });
let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedisServer();
  Object.assign(config, { REDIS_HOST: '127.0.0.1', REDIS_PORT: redis.port });
});
const harness = useWorkflowHarness(config, { api: false });
// After the harness's afterAll, which closes the clients of this server.
afterAll(() => redis?.stop());
let clients: Clients;
let temporal: Client;
beforeAll(() => ({ clients, temporal } = harness));

async function storedOrder(saleId: number, itemId: number): Promise<OrderInput> {
  // A real order id names its sale, so Orders.pay can find its reservation (the route's path).
  const order: OrderInput = { orderId: newOrderId(saleId), saleId, itemId, userId: `buyer-${randomUUID()}`, priceMinor: PRICE, paymentWindowMs: WINDOW_MS, reservedAtMs: Date.now() };
  const held = await reserveUnit(clients, order);
  await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, held);
  await until('the order stored PENDING', async () => (await orderRow(clients.pool, order.orderId))?.status === 'PENDING');
  return held;
}

test('Redis frozen for 20 s while a pay update and a paid signal arrive for stored orders inside their window: both PAID', async () => {
  const sale = await createTestSale(clients, { quantities: [2], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const itemId = sale.items[0].itemId;
  const [byUpdate, bySignal] = [await storedOrder(sale.saleId, itemId), await storedOrder(sale.saleId, itemId)];
  redis.pause();
  const pausedAt = Date.now();
  const resumed = new Promise((resolve) => setTimeout(resolve, OUTAGE_MS)).then(() => redis.resume());
  try {
    const update = temporal.workflow.getHandle(byUpdate.orderId).executeUpdate(payUpdate, { args: [{ paymentId: `upd-${byUpdate.orderId}`, amount: PRICE }] });
    await temporal.workflow.getHandle(bySignal.orderId).signal(paidSignal, { paymentId: `sig-${bySignal.orderId}`, amount: PRICE });
    expect(await update).toEqual({ status: 'PAID', paymentId: `upd-${byUpdate.orderId}` });
    await until('the signalled order PAID', async () => (await orderRow(clients.pool, bySignal.orderId))?.status === 'PAID', WINDOW_MS);
    // Both were decided while Redis was still frozen.
    expect(Date.now()).toBeLessThan(pausedAt + OUTAGE_MS);
  } finally {
    await resumed;
  }
  for (const order of [byUpdate, bySignal]) {
    expect(await temporal.workflow.getHandle(order.orderId).result()).toMatchObject({ status: 'PAID' });
  }
}, 90_000);
