/**
 * EventPublisher's produce requests (src/order/publisher.ts): one item per request, so that a request has one
 * partition and one leader, whatever the order the events wait in; each item's events in the order published.
 * The producer is a recording fake: what the broker does with a request is the stack suites' (test/kafka).
 */
import type { Kafka, Producer, ProducerRecord } from 'kafkajs';
import { EventPublisher, takeOneItem, type StoredEvent } from '../../src/order/publisher';

const event = (itemId: number, n: number): StoredEvent => ({ eventId: `e-${itemId}-${n}`, type: 'OrderPlaced', orderId: `o-${n}`, itemId, payload: `{"n":${n}}` });

test('takeOneItem takes the first waiting event’s item, in order, and keeps the others in theirs', () => {
  const waiting = [event(1, 0), event(2, 1), event(1, 2), event(3, 3), event(2, 4), event(1, 5)].map((e) => ({ event: e }));
  expect(takeOneItem(waiting).map((w) => w.event.eventId)).toEqual(['e-1-0', 'e-1-2', 'e-1-5']);
  expect(waiting.map((w) => w.event.eventId)).toEqual(['e-2-1', 'e-3-3', 'e-2-4']);
  expect(takeOneItem(waiting).map((w) => w.event.eventId)).toEqual(['e-2-1', 'e-2-4']);
  expect(takeOneItem([])).toEqual([]);
});

test('takeOneItem takes at most 500 events of an item; the rest wait', () => {
  const waiting = Array.from({ length: 600 }, (_, n) => ({ event: event(7, n) }));
  expect(takeOneItem(waiting)).toHaveLength(500);
  expect(waiting.map((w) => w.event.eventId)).toEqual(Array.from({ length: 100 }, (_, n) => `e-7-${500 + n}`));
});

test('events of several items waiting together go in requests of one key each, every item’s events in order', async () => {
  const requests: string[][] = [];
  let answer: (() => void) | undefined;
  const producer = {
    connect: async () => undefined,
    disconnect: async () => undefined,
    // The first request stays unanswered until the others wait behind it, as while a broker is slow.
    send: (record: ProducerRecord) => {
      requests.push(record.messages.map((m) => `${String(m.key)}:${String(m.headers?.eventId)}`));
      return requests.length === 1 ? new Promise((resolve) => (answer = () => resolve([]))) : Promise.resolve([]);
    },
  } as unknown as Producer;
  const publisher = await EventPublisher.connect({ producer: () => producer } as unknown as Kafka, 'topic');
  const first = publisher.publishStored([event(1, 0)]);
  const rest = publisher.publishStored([event(2, 1), event(1, 2), event(3, 3), event(2, 4)]);
  answer?.();
  await Promise.all([first, rest]);
  expect(requests).toEqual([['1:e-1-0'], ['2:e-2-1', '2:e-2-4'], ['1:e-1-2'], ['3:e-3-3']]);
});
