/**
 * Order events against the real broker. EventPublisher: concurrent publishes share produce requests (each
 * request carries what arrived while the one before was in flight), every event lands once, and one item's
 * events keep the order they were published in; a publish of an event still waiting joins it instead of
 * sending a copy. readSaleEvents (the audit's reader): from a time on, it skips what was published before.
 */
import { randomUUID } from 'node:crypto';
import type { Kafka, ProducerConfig } from 'kafkajs';
import { readSaleEvents } from '../../src/audit';
import { orderEvent, type OrderEvent } from '../../src/order/events';
import { createKafka } from '../../src/infra/kafka';
import { EventPublisher } from '../../src/order/publisher';
import { testConfig, until } from '../support/helpers';
import { openEventTap, type EventTap } from '../support/kafka';

const config = testConfig();
let publisher: EventPublisher;
let tap: EventTap;
let produceRequests = 0;
let kafka: Kafka;

beforeAll(async () => {
  kafka = createKafka(config, 'test-publisher');
  // The real client, its producer's produce requests counted (kafkajs' instrumentation events).
  const counting = {
    producer: (options: ProducerConfig) => {
      const producer = kafka.producer(options);
      producer.on(producer.events.REQUEST, ({ payload }) => {
        if (payload.apiName === 'Produce') produceRequests += 1;
      });
      return producer;
    },
  } as unknown as Kafka;
  publisher = await EventPublisher.connect(counting, config.KAFKA_TOPIC);
  tap = await openEventTap(config);
});

afterAll(async () => {
  await Promise.allSettled([publisher?.disconnect(), tap?.close()]);
});

/** Events of `orders` orders on `items` items, saleId 0 (no sale has it, so no audit counts them). */
function eventsOf(orders: number, items: number, saleId = 0): OrderEvent[][] {
  return Array.from({ length: orders }, (_, i) => {
    const order = { orderId: randomUUID(), saleId, itemId: 900_000 + (i % items), userId: `publisher-${i}` };
    return [orderEvent('OrderPlaced', order, new Date()), orderEvent('OrderExpired', order, new Date())];
  });
}

test('200 orders published at once: far fewer produce requests than events, each event once, each item in publish order', async () => {
  const orders = eventsOf(200, 4);
  const before = produceRequests;
  await Promise.all(orders.map((events) => publisher.publishAll(events)));
  expect(produceRequests - before).toBeGreaterThan(0);
  expect(produceRequests - before).toBeLessThan(40);

  const all = orders.flat();
  const landed = await tap.collect(
    orders.map(([placed]) => placed.orderId),
    { until: (es) => es.length >= all.length, timeoutMs: 30_000 },
  );
  expect(landed.map((e) => e.eventId).sort()).toEqual(all.map((e) => e.eventId).sort());
  for (const itemId of new Set(all.map((e) => e.itemId))) {
    expect(landed.filter((e) => e.itemId === itemId).map((e) => e.eventId)).toEqual(all.filter((e) => e.itemId === itemId).map((e) => e.eventId));
  }
});

test('an event published again while its first publish waits joins it: one copy on the topic', async () => {
  const [[placed, expired]] = eventsOf(1, 1);
  await Promise.all([publisher.publishAll([placed, expired]), publisher.publish(placed), publisher.publish(expired)]);
  // Every send has been answered, so the topic already holds any copy.
  expect((await tap.collect([placed.orderId])).map((e) => e.type)).toEqual(['OrderPlaced', 'OrderExpired']);
});

test("readSaleEvents from a time: the sale's events published after it, none of those before", async () => {
  // A sale id no sale has, so no audit counts these events.
  const saleId = -Math.floor(Math.random() * 1e9) - 1;
  const [[before], [after]] = eventsOf(2, 1, saleId);
  const startMs = Date.now();
  await publisher.publish(before);
  // Message timestamps are the producer's clock in ms: `before` has one below sinceMs, `after` one at or above it.
  const publishedMs = Date.now();
  const sinceMs = await until('the clock past the first publish', async () => (Date.now() > publishedMs ? Date.now() : undefined), 1000);
  await publisher.publish(after);
  const fromThen = await readSaleEvents(kafka, config.KAFKA_TOPIC, saleId, sinceMs);
  expect([...fromThen.events.keys()]).toEqual([after.eventId]);
  const fromStart = await readSaleEvents(kafka, config.KAFKA_TOPIC, saleId, startMs);
  expect([...fromStart.events.keys()].sort()).toEqual([before.eventId, after.eventId].sort());
}, 60_000);
