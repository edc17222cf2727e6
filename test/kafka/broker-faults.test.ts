/**
 * Broker faults mid-sale on the three-broker cluster (scripts/kafka-cluster-stack.sh: topic on all three,
 * min.insync.replicas 2; the publisher's idempotent producer, acks=all), while orders are placed, paid and
 * expire: the broker leading the sale's partition and coordinating the ledger's group SIGKILLed, then started
 * again; the partition's leadership moved by a reassignment. No order is held past its deadline by the fault
 * (the outbox: src/order/outbox.ts), every order's events are on the topic once each and in order (I5), and the
 * ledger consumer (a group) records each of them once.
 */
import { randomUUID } from 'node:crypto';
import { startLedger, type RunningLedger } from '../../src/consumers/ledger';
import { newOrderId } from '../../src/order/orderId';
import type { OrderInput } from '../../src/order/types';
import type { Sale } from '../../src/sale/sales';
import { startOrderWorkflow } from '../../src/workflows/client';
import { paidSignal } from '../../src/workflows/definitions';
import { createTestSale, eventually, orderRow, reserveUnit, settledAudit, testConfig } from '../support/helpers';
import { onceInOrder, uniqueEvents } from '../support/kafka';
import { clusterBrokers, coordinatorOf, ensureClusterTopic, killBroker, leaderOf, moveLeader, restartBrokers } from '../support/kafkaCluster';
import { useWorkflowHarness } from '../support/workflowHarness';

const PRICE = 800;
const WINDOW_MS = 4000;
const config = testConfig({ KAFKA_BROKERS: clusterBrokers() });
// Before the harness's tap and worker open: the suite's topic on the cluster, replicated.
beforeAll(() => ensureClusterTopic(config.KAFKA_TOPIC), 120_000);
const harness = useWorkflowHarness(config, { api: false });
let ledger: RunningLedger | undefined;

/** @returns a new consumer group id that broker `node` coordinates */
async function groupCoordinatedBy(node: number): Promise<string> {
  for (;;) {
    const groupId = `test-ledger-${randomUUID()}`;
    if ((await coordinatorOf(groupId)) === node) return groupId;
  }
}

afterAll(async () => {
  await ledger?.stop();
  await restartBrokers();
}, 300_000);

/** Reserves and starts `count` orders of the sale's one item; the even ones are paid by signal at once. */
async function placeOrders(sale: Sale, count: number, tag: string): Promise<{ order: OrderInput; paid: boolean }[]> {
  const { clients, temporal } = harness;
  const placed = [];
  for (let i = 0; i < count; i++) {
    const input: OrderInput = {
      orderId: newOrderId(sale.saleId),
      saleId: sale.saleId,
      itemId: sale.items[0].itemId,
      userId: `${tag}-${i}-${randomUUID().slice(0, 8)}`,
      priceMinor: PRICE,
      paymentWindowMs: WINDOW_MS,
      reservedAtMs: Date.now(),
    };
    const order = await reserveUnit(clients, input);
    await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, order);
    const paid = i % 2 === 0;
    if (paid) await temporal.workflow.getHandle(order.orderId).signal(paidSignal, { paymentId: `pay-${order.orderId}`, amount: PRICE });
    placed.push({ order, paid });
  }
  return placed;
}

/** Every order final within seconds of its deadline (PAID when paid, else EXPIRED): none held by the fault. */
async function settledOnTime(placed: { order: OrderInput; paid: boolean }[]): Promise<void> {
  const lastDeadline = Math.max(...placed.map(({ order }) => order.reservedAtMs + WINDOW_MS));
  await eventually(async () => {
    for (const { order, paid } of placed) expect((await orderRow(harness.clients.pool, order.orderId))?.status).toBe(paid ? 'PAID' : 'EXPIRED');
  }, Math.max(1000, lastDeadline + 5000 - Date.now()));
}

/** @returns the orders' events on the topic once each has its final one (or after timeoutMs) */
const collectFinal = (ids: string[], timeoutMs: number) =>
  harness.tap.collect(ids, { until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === ids.length, timeoutMs });

/** The sale audited, every order's events once each and in order (I5), and the ledger has recorded each once; then it stops. */
async function deliveredOnce(sale: Sale, ids: string[]): Promise<void> {
  const { clients, temporal } = harness;
  expect(await settledAudit(config, clients, temporal, sale.saleId, ids, 120_000)).toEqual([]);
  const events = await collectFinal(ids, 90_000);
  expect(onceInOrder(events, ids)).toEqual([]);
  // order_events is keyed by eventId: a copy the ledger is handed again records nothing.
  const unique = uniqueEvents(events).length;
  await eventually(async () => {
    const recorded = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM order_events WHERE order_id = ANY($1::uuid[])', [ids]);
    expect(recorded.rows[0].n).toBe(unique);
  }, 60_000);
  await ledger?.stop();
  ledger = undefined;
}

const idsOf = (...groups: { order: OrderInput }[][]) => groups.flat().map(({ order }) => order.orderId);

test('the leader of the sale’s partition SIGKILLed mid-sale, then restarted: no order held past its deadline, each event once and in order, the ledger caught up', async () => {
  const { clients } = harness;
  const sale = await createTestSale(clients, { quantities: [12], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const key = String(sale.items[0].itemId);
  const leader = await leaderOf(config.KAFKA_TOPIC, key);
  // The ledger's group coordinated by that broker too: its loss takes the partition's leader and the coordinator.
  ledger = await startLedger(config, clients.pool, { groupId: await groupCoordinatedBy(leader) });
  const before = await placeOrders(sale, 4, 'before');
  killBroker(leader);
  const during = await placeOrders(sale, 4, 'during');
  await settledOnTime([...before, ...during]);

  // Two of three in sync: the partition has a new leader, and the events are published before the restart.
  expect(onceInOrder(await collectFinal(idsOf(during), 60_000), idsOf(during))).toEqual([]);
  expect(await leaderOf(config.KAFKA_TOPIC, key)).not.toBe(leader);

  await restartBrokers();
  const after = await placeOrders(sale, 4, 'after');
  await deliveredOnce(sale, idsOf(before, during, after));
}, 300_000);

test('the leadership of the sale’s partition moved mid-sale by a reassignment: no order held past its deadline, each event once and in order, the ledger caught up', async () => {
  const { clients } = harness;
  const sale = await createTestSale(clients, { quantities: [12], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  ledger = await startLedger(config, clients.pool, { groupId: `test-ledger-${randomUUID()}` });
  const before = await placeOrders(sale, 4, 'before');
  // The move and the orders at once: events are published while the partition changes hands.
  const [moved, during] = await Promise.all([moveLeader(config.KAFKA_TOPIC, String(sale.items[0].itemId)), placeOrders(sale, 4, 'during')]);
  expect(moved.to).not.toBe(moved.from);
  const after = await placeOrders(sale, 4, 'after');
  await settledOnTime([...before, ...during, ...after]);
  await deliveredOnce(sale, idsOf(before, during, after));
}, 300_000);
