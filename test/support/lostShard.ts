/**
 * A stock shard that loses its data while orders are in flight, then rebuilt, through the real API, starter,
 * worker, Temporal, Kafka and PostgreSQL (src/reservation/loading.ts; I1–I5): shared by the one-node suite
 * (test/api/lost-shard.test.ts) and the cluster suite (test/cluster/lost-shard.test.ts), which lose shard 0 of
 * one and shard 1 of three.
 * - Orders started but not run (no worker yet): the rebuild knows them, their buyers are answered 409 until
 *   they end, none ends REJECTED, and every unit of every shard is there once.
 * - An order paid through the route before its workflow existed (no starter yet), whose start queue entry went
 *   with the shard: the rebuild queues it again, its workflow runs, it ends PAID with OrderPlaced and OrderPaid.
 */
import type { Client } from '@temporalio/client';
import { startApi, type RunningApi } from '../../src/api/main';
import type { Config } from '../../src/config';
import { homeShard, shardKeys, type SaleLayout } from '../../src/reservation/layout';
import type { Sale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { buyerToken, connectClients, createTestSale, orderResult, settledAudit, until, type Clients } from './helpers';
import { countByType, openEventTap, uniqueEvents, type EventTap } from './kafka';
import { http, type Http } from './openapi';
import { installTestRuntime } from './temporalRuntime';

const PRICE = 2500;
/** Long enough for the presses, the loss and the rebuild before the first order expires. */
const WINDOW_MS = 20_000;

/**
 * Registers the suite's hooks and its two tests.
 * @param shards the stock shards of the item (one node: 1)
 * @param lost the shard whose data is lost
 */
export function lostShardSuite(config: Config, shards: number, lost: number): void {
  const run = Math.random().toString(36).slice(2, 8);
  let clients: Clients;
  let temporal: Client;
  let tap: EventTap;
  let worker: RunningWorker | undefined;
  const apis: RunningApi[] = [];

  beforeAll(async () => {
    installTestRuntime();
    clients = connectClients(config);
    temporal = await connectTemporal(config);
    tap = await openEventTap(config);
  }, 60_000);
  afterAll(async () => {
    await Promise.allSettled(apis.map((api) => api.close()));
    await worker?.shutdown();
    await Promise.allSettled([temporal?.connection.close(), tap?.close(), clients?.close()]);
  });

  /** Starts an API (with its starter, or without one), whose doors `call` and `internal` reach. */
  async function api(starter: boolean): Promise<{ call: Http; internal: Http }> {
    const started = await startApi({ ...config, STARTER_IN_API: starter });
    apis.push(started);
    return { call: http(started.url), internal: http(started.internalUrl) };
  }

  async function sale(quantity: number): Promise<{ sale: Sale; itemId: number; layout: SaleLayout }> {
    const created = await createTestSale(clients, { quantities: [quantity], stockShards: [shards], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
    return { sale: created, itemId: created.items[0].itemId, layout: await clients.store.layouts.get(created.saleId) };
  }

  /** Every key of the shard, its start queue and loaded mark included, as a master that restarted empty. */
  async function loseShard(layout: SaleLayout, itemId: number): Promise<void> {
    const keys = shardKeys(layout.tags[lost]);
    await clients.redis.del(keys.buyers, keys.reservations, keys.claims, keys.stock(itemId), keys.returns(itemId), keys.startQueue, keys.loaded, keys.released);
  }

  const rebuildPath = (saleId: number) => `/api/admin/sales/${saleId}/stock?rebuild=true${shards > 1 ? '&force=true' : ''}`;
  const buyers = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}-${run}-${i}`);

  test(`shard ${lost} of ${shards} lost while its orders' workflows were started and no worker ran them: rebuilt, their buyers get 409 until the orders end, none ends REJECTED, every unit back once`, async () => {
    const { sale: created, itemId, layout } = await sale(12 * shards);
    const { call, internal } = await api(true);
    const crowd = await Promise.all(buyers('unrun', 8 * shards).map(async (buyer) => ({ buyer, token: await buyerToken(config, buyer) })));
    const replies = await Promise.all(crowd.map(({ token }) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token })));
    expect(replies.map((r) => r.status)).toEqual(crowd.map(() => 202));
    const orderIds = replies.map((r) => r.body.orderId as string);
    // Every workflow started, none run: no worker polls the task queue yet.
    await until('every workflow started', async () => (await temporal.workflow.count(`SaleId = ${created.saleId}`)).count === orderIds.length);
    const onLost = await clients.redis.hlen(shardKeys(layout.tags[lost]).reservations);
    expect(onLost).toBeGreaterThan(0);

    await loseShard(layout, itemId);
    expect(await internal('POST', rebuildPath(created.saleId), { token: config.ADMIN_TOKEN })).toMatchObject({ status: 200 });
    // Each buyer still holds their order: a press names it.
    const again = await Promise.all(crowd.map(({ token }) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token })));
    expect(again.map((r) => [r.status, r.body.orderId])).toEqual(orderIds.map((orderId) => [409, orderId]));

    worker = await startWorker(config, await buildWorkflowBundle());
    expect(await settledAudit(config, clients, temporal, created.saleId, orderIds, 120_000)).toEqual([]);
    const statuses = await clients.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [created.saleId]);
    expect(statuses.rows).toEqual([{ status: 'EXPIRED', n: orderIds.length }]);
    expect((await clients.store.view.stockByShard(created.saleId, [itemId])).get(itemId)).toEqual(Array.from({ length: shards }, () => 12));
  }, 180_000);

  test(`an order paid through the route before its workflow started, its entry lost with shard ${lost}: the rebuild queues it again, it ends PAID with OrderPlaced and OrderPaid`, async () => {
    worker ??= await startWorker(config, await buildWorkflowBundle());
    const { sale: created, itemId, layout } = await sale(4 * shards);
    const { call, internal } = await api(false);
    // A buyer homed on the shard to be lost: their unit comes from there (it has stock).
    const buyer = buyers('payer', 200).find((name) => homeShard(layout, name) === lost) as string;
    const reply = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(config, buyer) });
    expect(reply.status).toBe(202);
    const order = { orderId: reply.body.orderId as string, buyer };
    expect(await clients.redis.hexists(shardKeys(layout.tags[lost]).reservations, order.orderId)).toBe(1);
    const payment = { paymentId: `route-${order.orderId}`, amount: PRICE };
    const paid = await internal('POST', `/api/flash-sales/orders/${order.orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: payment });
    expect(paid).toMatchObject({ status: 200, body: { status: 'PAID' } });

    await loseShard(layout, itemId);
    expect(await internal('POST', rebuildPath(created.saleId), { token: config.ADMIN_TOKEN })).toMatchObject({ status: 200 });
    await api(true);
    expect(await orderResult(temporal, order.orderId)).toMatchObject({ status: 'PAID', paymentId: payment.paymentId });
    const seen = uniqueEvents(await tap.collect([order.orderId], { until: (events) => events.some((e) => e.type === 'OrderPaid') }));
    expect(countByType(seen)).toEqual({ OrderPlaced: 1, OrderPaid: 1 });
    expect(await settledAudit(config, clients, temporal, created.saleId, [order.orderId])).toEqual([]);
  }, 180_000);
}
