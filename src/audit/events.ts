/** A sale's events as the audit reads them from the Kafka topic: from the sale's creation to the topic's end. */
import { randomUUID } from 'node:crypto';
import type { Kafka } from 'kafkajs';
import type { Pool } from 'pg';
import type { OrderEvent } from '../order/events';

/** How far behind PostgreSQL's clock a producer's may be for the audit still to read all of a sale's events. ms. */
const PRODUCER_CLOCK_MARGIN_MS = 15 * 60_000;

/** @returns the event in a message, or undefined for a message that is not one of ours (other producers may share the topic) */
function parseEvent(value: Buffer | null): OrderEvent | undefined {
  try {
    const event = JSON.parse(value?.toString() ?? '') as OrderEvent;
    return typeof event === 'object' && event !== null && typeof event.eventId === 'string' ? event : undefined;
  } catch {
    return undefined;
  }
}

/** How long the audit waits for the relay to publish what the sale's transitions wrote into the outbox (ms). */
const RELAY_WAIT_MS = 30_000;

/**
 * Waits until the outbox holds none of the sale's events (the relay published them: src/order/outbox.ts), at most
 * RELAY_WAIT_MS, so that the topic the audit reads next has every event of a sale at rest.
 * @returns how many of the sale's events the outbox still holds (0 once relayed)
 */
export async function unrelayedEvents(pool: Pool, saleId: number, waitMs = RELAY_WAIT_MS): Promise<number> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const res = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM order_outbox WHERE item_id IN (SELECT id FROM items WHERE sale_id = $1)', [saleId]);
    const left = res.rows[0].n;
    if (left === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * Where a sale's events can start on the topic: no event of a sale is older than the sale, so a reader needs
 * the sale's stretch of the topic, not every sale's before it.
 * @returns ms since the epoch, the sale's creation less PRODUCER_CLOCK_MARGIN_MS (a producer's clock behind
 *   PostgreSQL's); undefined when there is no such sale
 */
export async function saleEventsSince(pool: Pool, saleId: number): Promise<number | undefined> {
  const res = await pool.query<{ createdAt: Date }>('SELECT created_at AS "createdAt" FROM sale_events WHERE id = $1', [saleId]);
  return res.rows[0] && res.rows[0].createdAt.getTime() - PRODUCER_CLOCK_MARGIN_MS;
}

/**
 * Reads the topic up to its current end and returns the sale's events, duplicates dropped by eventId (I5).
 * @param sinceMs where to start: the first message stamped at or after it (the producer's clock, ms since the
 *   epoch); the whole topic when omitted
 */
export async function readSaleEvents(
  kafka: Kafka,
  topic: string,
  saleId: number,
  sinceMs?: number,
): Promise<{ events: Map<string, OrderEvent>; duplicates: number; conflicting: string[] }> {
  const groupId = `audit-${randomUUID()}`;
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  const start = new Map(
    sinceMs === undefined ? offsets.map((o) => [o.partition, BigInt(o.low)]) : (await admin.fetchTopicOffsetsByTimestamp(topic, sinceMs)).map((o) => [o.partition, BigInt(o.offset)]),
  );
  // The new group starts where the sale's events can start.
  if (sinceMs !== undefined) await admin.setOffsets({ groupId, topic, partitions: [...start].map(([partition, offset]) => ({ partition, offset: String(offset) })) });
  await admin.disconnect();
  const end = new Map(offsets.filter((o) => BigInt(o.high) > (start.get(o.partition) ?? BigInt(o.low))).map((o) => [o.partition, BigInt(o.high)]));
  const events = new Map<string, OrderEvent>();
  let duplicates = 0;
  // A redelivery must carry the same facts; one eventId with two different stories is a bug, not a duplicate.
  const conflicting: string[] = [];
  const facts = (e: OrderEvent) => JSON.stringify({ ...e, occurredAt: undefined });
  if (end.size === 0) return { events, duplicates, conflicting };
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            for (const message of batch.messages) {
              const event = parseEvent(message.value);
              if (event?.saleId === saleId) {
                const seen = events.get(event.eventId);
                if (!seen) events.set(event.eventId, event);
                else {
                  duplicates += 1;
                  if (facts(seen) !== facts(event)) conflicting.push(event.eventId);
                }
              }
            }
            const last = batch.messages.at(-1);
            const high = end.get(batch.partition);
            if (last && high !== undefined && BigInt(last.offset) + 1n >= high) end.delete(batch.partition);
            if (end.size === 0) resolve();
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return { events, duplicates, conflicting };
}
