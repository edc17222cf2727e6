/**
 * A broker lost mid-sale on the three-broker cluster (scripts/kafka-cluster-stack.sh: topic on all three,
 * min.insync.replicas 2; the publisher's idempotent producer, acks=all): the broker leading the sale's partition
 * is SIGKILLed while orders are placed, paid and expire, then started again. No order is held past its deadline
 * by the outage (the outbox: src/order/outbox.ts), every order's events are on the topic once each and in
 * order (I5), and the ledger consumer (a group that broker coordinated) records each of them once.
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
import { clusterBrokers, coordinatorOf, ensureClusterTopic, killBroker, leaderOf, restartBrokers } from '../support/kafkaCluster';
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

test('the leader of the sale’s partition SIGKILLed mid-sale, then restarted: no order held past its deadline, each event once and in order, the ledger caught up', async () => {
  const { clients, temporal, tap } = harness;
  const sale = await createTestSale(clients, { quantities: [12], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const leader = await leaderOf(config.KAFKA_TOPIC, String(sale.items[0].itemId));
  // The ledger's group coordinated by that broker too: its loss takes the partition's leader and the coordinator.
  ledger = await startLedger(config, clients.pool, { groupId: await groupCoordinatedBy(leader) });
  const before = await placeOrders(sale, 4, 'before');
  killBroker(leader);
  const during = await placeOrders(sale, 4, 'during');

  // The broker still down (its restart is ours to make): every order final within seconds of its deadline.
  const lastDeadline = Math.max(...[...before, ...during].map(({ order }) => order.reservedAtMs + WINDOW_MS));
  await eventually(async () => {
    for (const { order, paid } of [...before, ...during]) expect((await orderRow(clients.pool, order.orderId))?.status).toBe(paid ? 'PAID' : 'EXPIRED');
  }, Math.max(1000, lastDeadline + 5000 - Date.now()));

  // Two of three in sync: the partition has a new leader, and the events are published before the restart.
  const whileDown = during.map(({ order }) => order.orderId);
  const published = await tap.collect(whileDown, { until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === whileDown.length, timeoutMs: 60_000 });
  expect(onceInOrder(published, whileDown)).toEqual([]);
  expect(await leaderOf(config.KAFKA_TOPIC, String(sale.items[0].itemId))).not.toBe(leader);

  await restartBrokers();
  const after = await placeOrders(sale, 4, 'after');
  const ids = [...before, ...during, ...after].map(({ order }) => order.orderId);
  expect(await settledAudit(config, clients, temporal, sale.saleId, ids, 120_000)).toEqual([]);
  const events = await tap.collect(ids, {
    until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === ids.length,
    timeoutMs: 90_000,
  });
  expect(onceInOrder(events, ids)).toEqual([]);
  // The ledger, a consumer group, records every one of them once (order_events is keyed by eventId).
  const unique = uniqueEvents(events).length;
  await eventually(async () => {
    const recorded = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM order_events WHERE order_id = ANY($1::uuid[])', [ids]);
    expect(recorded.rows[0].n).toBe(unique);
  }, 60_000);
}, 300_000);
