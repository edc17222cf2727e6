/**
 * Reads order events back from the real topic (the config's KAFKA_TOPIC) for assertions. A tap remembers the topic's
 * end offsets when it opens and consumes from exactly there with a fresh consumer group (its committed offsets
 * are set before the consumer joins), so it sees every event published afterwards and nothing older.
 * `collect` waits until the tap has read everything published before the call (and the predicate holds), so a
 * duplicate that was published is always seen: "exactly one" assertions can fail. A message the consumer is
 * handed twice (after a reconnect) counts once: the tap reports what is on the topic.
 */
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, type Admin, type Consumer } from 'kafkajs';
import type { Config } from '../../src/config';
import { kafkaConnection } from '../../src/infra/connections';
import { createPool } from '../../src/infra/db';
import type { OrderEvent } from '../../src/order/events';

export interface CollectOptions {
  /** Keep reading until this holds for the events collected so far (default: as soon as caught up). */
  until?: (events: OrderEvent[]) => boolean;
  /** Give up after this many ms and return what was read (the assertions then say what is missing). */
  timeoutMs?: number;
}

export interface EventTap {
  /**
   * @returns the events (in topic order per partition, arrival order across partitions) whose orderId is in
   *   orderIds, once the outbox holds none of theirs (the relay published what their transitions wrote:
   *   src/order/outbox.ts), the tap has read up to the offsets the topic had then and `until` holds, or when the
   *   deadline passes
   */
  collect(orderIds: Iterable<string>, options?: CollectOptions): Promise<OrderEvent[]>;
  /** As collect, for the events that match (e.g. every event of one sale). */
  collectWhere(match: (event: OrderEvent) => boolean, options?: CollectOptions): Promise<OrderEvent[]>;
  /** @returns the headers of the first message carrying the event (as strings), or undefined before it is read */
  headersOf(eventId: string): Record<string, string> | undefined;
  /** Disconnects the consumer and admin client and deletes the tap's consumer group. */
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function endOffsets(admin: Admin, topic: string): Promise<Map<number, bigint>> {
  const offsets = await admin.fetchTopicOffsets(topic);
  return new Map(offsets.map((o) => [o.partition, BigInt(o.high)]));
}

/** Opens a tap on config.KAFKA_TOPIC starting at the topic's current end. Close it in afterAll. */
export async function openEventTap(config: Config): Promise<EventTap> {
  const kafka = new Kafka({
    clientId: `test-tap-${randomUUID()}`,
    ...kafkaConnection(config), // brokers, TLS and SASL as the service's own clients have them
    logLevel: logLevel.ERROR,
  });
  const topic = config.KAFKA_TOPIC;
  const groupId = `test-tap-${randomUUID()}`;
  const admin = kafka.admin();
  await admin.connect();
  const start = await endOffsets(admin, topic);
  await admin.setOffsets({ groupId, topic, partitions: [...start].map(([partition, offset]) => ({ partition, offset: String(offset) })) });

  // Next offset to read per partition, advanced as messages arrive.
  const position = new Map(start);
  const events: OrderEvent[] = [];
  const headers = new Map<string, Record<string, string>>();
  const consumer: Consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: false });
  // Delivered messages by partition and offset: a consumer that reconnects (the broker restarted) may be handed
  // a message again, which is one message on the topic, not two.
  const delivered = new Set<string>();
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const at = `${partition}:${message.offset}`;
      if (delivered.has(at)) return;
      delivered.add(at);
      if (message.value) {
        try {
          const event = JSON.parse(message.value.toString('utf8')) as OrderEvent;
          events.push(event);
          if (!headers.has(event.eventId)) headers.set(event.eventId, Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)])));
        } catch {
          // Not one of ours; the position still advances.
        }
      }
      position.set(partition, BigInt(message.offset) + 1n);
    },
  });

  const pool = createPool(config);
  /** Waits until the outbox holds no event of these orders (or the deadline passes). */
  const relayed = async (orderIds: string[], deadline: number) => {
    while (Date.now() < deadline) {
      const res = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM order_outbox WHERE order_id = ANY($1::uuid[])', [orderIds]);
      if (res.rows[0].n === 0) return;
      await sleep(50);
    }
  };
  const collectWhere = async (match: (event: OrderEvent) => boolean, options: CollectOptions = {}, orderIds: string[] = []) => {
    const until = options.until ?? (() => true);
    const deadline = Date.now() + (options.timeoutMs ?? 20_000);
    if (orderIds.length) await relayed(orderIds, deadline);
    const target = await endOffsets(admin, topic);
    const mine = () => events.filter(match);
    const caughtUp = () => [...target].every(([partition, high]) => (position.get(partition) ?? 0n) >= high);
    while (Date.now() < deadline) {
      if (caughtUp() && until(mine())) return mine();
      await sleep(50);
      if (caughtUp()) for (const [partition, high] of await endOffsets(admin, topic)) target.set(partition, high);
    }
    return mine();
  };
  return {
    collect(orderIds, options) {
      const wanted = new Set(orderIds);
      return collectWhere((e) => wanted.has(e.orderId), options, [...wanted]);
    },
    collectWhere: (match, options) => collectWhere(match, options),
    headersOf: (eventId) => headers.get(eventId),
    async close() {
      await pool.end().catch(() => undefined);
      await consumer.disconnect().catch(() => undefined);
      await admin.deleteGroups([groupId]).catch(() => undefined);
      await admin.disconnect().catch(() => undefined);
    },
  };
}

/**
 * Drops redelivered copies the way a consumer does (I5: at-least-once publishing, one effect per eventId).
 * A retried publish carries the same eventId and the same content; only occurredAt may differ (the retry
 * happened later). Copies that disagree on anything else would be two different effects under one id.
 * @returns the first copy of each eventId, in order
 * @throws when two copies of one eventId differ in anything but occurredAt
 */
export function uniqueEvents(events: readonly OrderEvent[]): OrderEvent[] {
  const first = new Map<string, OrderEvent>();
  const content = ({ occurredAt: _occurredAt, ...rest }: OrderEvent) => JSON.stringify(Object.entries(rest).sort());
  for (const e of events) {
    const seen = first.get(e.eventId);
    if (!seen) first.set(e.eventId, e);
    else if (content(seen) !== content(e)) throw new Error(`two different events share eventId ${e.eventId}: ${content(seen)} vs ${content(e)}`);
  }
  return [...first.values()];
}

/** @returns how many events of each type, e.g. { OrderPlaced: 1, OrderPaid: 1 } */
export function countByType(events: readonly OrderEvent[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const e of events) counts[e.type] = (counts[e.type] ?? 0) + 1;
  return counts;
}

const FINAL_TYPES = new Set(['OrderPaid', 'OrderExpired', 'OrderCancelled']);

/**
 * I5 on the topic for each order: every event once (no eventId twice), OrderPlaced first, a final event, and
 * nothing after it but the refunds that follow a refused payment. The events as a tap read them (one item, so
 * one partition: in the order the broker appended them).
 * @returns one line per order that breaks it (empty when all hold)
 */
export function onceInOrder(events: readonly OrderEvent[], orderIds: readonly string[]): string[] {
  const broken: string[] = [];
  for (const orderId of orderIds) {
    const own = events.filter((e) => e.orderId === orderId);
    const copies = new Map<string, number>();
    for (const e of own) copies.set(e.eventId, (copies.get(e.eventId) ?? 0) + 1);
    const twice = [...copies].filter(([, n]) => n > 1).map(([eventId]) => eventId);
    const finalAt = own.findIndex((e) => FINAL_TYPES.has(e.type));
    const after = own.slice(finalAt + 1).filter((e) => e.type !== 'PaymentRefundRequired');
    if (twice.length) broken.push(`${orderId}: published twice ${twice.join(', ')}`);
    if (own[0]?.type !== 'OrderPlaced') broken.push(`${orderId}: first ${own[0]?.type ?? 'nothing'}, not OrderPlaced`);
    if (finalAt < 0) broken.push(`${orderId}: no final event`);
    else if (after.length) broken.push(`${orderId}: ${after.map((e) => e.type).join(', ')} after ${own[finalAt].type}`);
  }
  return broken;
}
