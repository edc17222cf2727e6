/**
 * The downstream ledger (src/consumers/ledger.ts) against the real Kafka topic and PostgreSQL: an event
 * published twice, and a whole batch delivered again after the consumer group's offsets went back (as after a
 * crash before the commit), each leave one order_events row per eventId (I5); with tracing on (an in-memory
 * exporter in this process), each batch's span links to the publish spans of its messages.
 * The ledger runs in a consumer group of its own, positioned at the topic's end before it starts, so it reads
 * only what this suite publishes after that.
 */
import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { Admin } from 'kafkajs';
import { startLedger, type RunningLedger } from '../../src/consumers/ledger';
import { orderEvent, type OrderEvent } from '../../src/order/events';
import { newOrderId } from '../../src/order/orderId';
import { createKafka } from '../../src/infra/kafka';
import { EventPublisher } from '../../src/order/publisher';
import { connectClients, createTestSale, testConfig, type Clients } from '../support/helpers';

const config = testConfig();
const groupId = `test-ledger-${randomUUID()}`;
let clients: Clients;
let admin: Admin;
let events: EventPublisher;
let ledger: RunningLedger | undefined;
/** Where the ledger's group started, per partition. */
let start: { partition: number; offset: string }[];

async function endOffsets(): Promise<{ partition: number; offset: string }[]> {
  return (await admin.fetchTopicOffsets(config.KAFKA_TOPIC)).map((o) => ({ partition: o.partition, offset: o.high }));
}

/** Waits until the ledger has committed offsets at least up to the topic's end as of this call. */
async function ledgerCaughtUp(timeoutMs = 30_000): Promise<void> {
  const target = new Map((await endOffsets()).map((o) => [o.partition, BigInt(o.offset)]));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const [committed] = await admin.fetchOffsets({ groupId, topics: [config.KAFKA_TOPIC] });
    const at = new Map(committed.partitions.map((p) => [p.partition, p.offset === '-1' ? -1n : BigInt(p.offset)]));
    if ([...target].every(([partition, high]) => (at.get(partition) ?? -1n) >= high)) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('the ledger did not commit up to the end of the topic in time');
}

async function rowsOf(orderId: string): Promise<{ event_id: string; type: string; sale_id: number; item_id: number; user_id: string }[]> {
  const res = await clients.pool.query(
    'SELECT event_id, type, sale_id, item_id, user_id FROM order_events WHERE order_id = $1 ORDER BY event_id',
    [orderId],
  );
  return res.rows;
}

// Tracing on in this process (Jest gives each suite its own globals): the publisher's and the ledger's spans.
const spans = new InMemorySpanExporter();
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }).register({ propagator: new W3CTraceContextPropagator() });

beforeAll(async () => {
  clients = connectClients(config);
  const kafka = createKafka(config, 'test-ledger');
  admin = kafka.admin();
  await admin.connect();
  events = await EventPublisher.connect(kafka, config.KAFKA_TOPIC);
  start = await endOffsets();
  await admin.setOffsets({ groupId, topic: config.KAFKA_TOPIC, partitions: start });
  ledger = await startLedger(config, clients.pool, { groupId });
});

afterAll(async () => {
  await ledger?.stop();
  await events?.disconnect();
  await admin?.deleteGroups([groupId]).catch(() => undefined);
  await admin?.disconnect();
  await clients?.close();
});

async function newOrderEvents(): Promise<{ orderId: string; placed: OrderEvent; paid: OrderEvent }> {
  const sale = await createTestSale(clients, { quantities: [3] });
  const order = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId: sale.items[0].itemId, userId: `buyer-${randomUUID()}` };
  return {
    orderId: order.orderId,
    placed: orderEvent('OrderPlaced', order, new Date()),
    paid: orderEvent('OrderPaid', order, new Date(), { paymentId: `pay-${order.orderId}`, amount: 1999 }),
  };
}

test('the same event published twice is recorded once', async () => {
  const { orderId, placed, paid } = await newOrderEvents();
  await events.publish(placed);
  await events.publish(placed);
  await events.publish(paid);
  await ledgerCaughtUp();

  expect(await rowsOf(orderId)).toEqual([
    { event_id: `${orderId}:OrderPaid`, type: 'OrderPaid', sale_id: placed.saleId, item_id: placed.itemId, user_id: placed.userId },
    { event_id: `${orderId}:OrderPlaced`, type: 'OrderPlaced', sale_id: placed.saleId, item_id: placed.itemId, user_id: placed.userId },
  ]);
});

test('a batch delivered again after the offsets went back (crash before commit) adds nothing', async () => {
  const { orderId, placed } = await newOrderEvents();
  await events.publish(placed);
  await ledgerCaughtUp();
  expect(await rowsOf(orderId)).toHaveLength(1);

  // Rewind the group to where this suite began: every event of the suite is delivered a second time.
  await ledger?.stop();
  ledger = undefined;
  await admin.setOffsets({ groupId, topic: config.KAFKA_TOPIC, partitions: start });
  ledger = await startLedger(config, clients.pool, { groupId });
  await ledgerCaughtUp();

  expect(await rowsOf(orderId)).toEqual([
    { event_id: `${orderId}:OrderPlaced`, type: 'OrderPlaced', sale_id: placed.saleId, item_id: placed.itemId, user_id: placed.userId },
  ]);
});

test("a batch's span links to the publish span of each of its messages", async () => {
  const { placed, paid } = await newOrderEvents();
  await trace.getTracer('test').startActiveSpan('the workflow', async (workflow) => {
    await events.publishAll([placed, paid]);
    workflow.end();
  });
  await ledgerCaughtUp();
  const finished = spans.getFinishedSpans();
  const published = finished.filter((s) => s.name === `publish ${config.KAFKA_TOPIC}` && [placed.eventId, paid.eventId].includes(String(s.attributes['messaging.message.id'])));
  expect(published).toHaveLength(2);
  const linked = finished.filter((s) => s.name === `process ${config.KAFKA_TOPIC}`).flatMap((s) => s.links.map((l) => l.context.spanId));
  for (const p of published) expect(linked).toContain(p.spanContext().spanId);
});
