/**
 * Downstream ledger (`node dist/consumers/ledger.js`): records each order event of Kafka once in PostgreSQL's
 * order_events (key eventId, ON CONFLICT DO NOTHING: a copy changes nothing, I5), committing offsets only after
 * the batch's insert; a crash in between redelivers the batch. A message that is not an order event is skipped.
 */
import { SpanKind, type Attributes, type Link } from '@opentelemetry/api';
import type { Batch, Consumer, EachBatchPayload, KafkaMessage } from 'kafkajs';
import type { Pool } from 'pg';
import { loadConfig, type Config } from '../config';
import { createPool } from '../infra/db';
import { MAX_INT4 } from '../order/ids';
import type { OrderEvent } from '../order/events';
import { isOrderId } from '../order/types';
import { createKafka } from '../infra/kafka';
import { onShutdown, runMain } from '../infra/lifecycle';
import { createLogger, type Logger } from '../infra/logger';
import { inSpan, linkTo, startTracing } from '../tracing';

/** Consumer group of the ledger; a second ledger process in the same group shares the partitions. */
export const LEDGER_GROUP_ID = 'flash-sale-ledger';

export interface LedgerOptions {
  /** Default LEDGER_GROUP_ID. */
  groupId?: string;
  /** Where a group without committed offsets starts; default true (a new ledger records the whole topic). */
  fromBeginning?: boolean;
  log?: Logger;
}

export interface RunningLedger {
  consumer: Consumer;
  /** Leaves the group after the batch in progress (its offsets are committed only if its insert was). */
  stop(): Promise<void>;
}

type LedgerRow = Pick<OrderEvent, 'eventId' | 'type' | 'orderId' | 'saleId' | 'itemId' | 'userId' | 'occurredAt'>;

const isId = (value: unknown): value is number => Number.isInteger(value) && (value as number) > 0 && (value as number) <= MAX_INT4;

/** @returns the event's ledger columns, or undefined when the message is not a well-formed order event */
function parse(message: KafkaMessage): LedgerRow | undefined {
  let event: Partial<OrderEvent>;
  try {
    event = JSON.parse(message.value?.toString('utf8') ?? '') as Partial<OrderEvent>;
  } catch {
    return undefined;
  }
  const { eventId, type, orderId, saleId, itemId, userId, occurredAt } = event ?? {};
  if (typeof eventId !== 'string' || eventId.length === 0 || typeof type !== 'string' || typeof userId !== 'string') return undefined;
  if (typeof orderId !== 'string' || !isOrderId(orderId) || !isId(saleId) || !isId(itemId)) return undefined;
  if (typeof occurredAt !== 'string' || Number.isNaN(Date.parse(occurredAt))) return undefined;
  return { eventId, type, orderId, saleId, itemId, userId, occurredAt };
}

/** Inserts the rows in one statement; rows whose eventId is already recorded (or repeated here) are skipped. */
async function record(pool: Pool, rows: readonly LedgerRow[]): Promise<number> {
  const res = await pool.query(
    `INSERT INTO order_events (event_id, type, order_id, sale_id, item_id, user_id, occurred_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::int[], $5::int[], $6::text[], $7::timestamptz[])
     ON CONFLICT (event_id) DO NOTHING`,
    [
      rows.map((r) => r.eventId),
      rows.map((r) => r.type),
      rows.map((r) => r.orderId),
      rows.map((r) => r.saleId),
      rows.map((r) => r.itemId),
      rows.map((r) => r.userId),
      rows.map((r) => r.occurredAt),
    ],
  );
  return res.rowCount ?? 0;
}

/**
 * A batch's CONSUMER span (tracing on): linked to each message's publish span, whose context its `traceparent`
 * header carries (src/order/publisher.ts), so every order's trace leads to where its events were recorded.
 */
function batchSpan(batch: Batch): { kind: SpanKind; attributes: Attributes; links: Link[] } {
  const links = batch.messages.flatMap((m) => linkTo(m.headers?.traceparent?.toString()) ?? []);
  return {
    kind: SpanKind.CONSUMER,
    attributes: { 'messaging.system': 'kafka', 'messaging.operation.type': 'process', 'messaging.destination.name': batch.topic, 'messaging.batch.message_count': batch.messages.length },
    links,
  };
}

/**
 * Joins the ledger's consumer group on config.KAFKA_TOPIC and records every event in order_events.
 * @throws kafkajs errors when the broker is unreachable at start
 */
export async function startLedger(config: Config, pool: Pool, options: LedgerOptions = {}): Promise<RunningLedger> {
  const log = options.log ?? createLogger(config.LOG_LEVEL, 'ledger');
  const consumer = createKafka(config, 'flash-sale-ledger').consumer({
    groupId: options.groupId ?? LEDGER_GROUP_ID,
    allowAutoTopicCreation: false,
  });
  /** Records a batch, then commits its offsets: after the insert, so a crash before the commit redelivers it. */
  const recordBatch = async ({ batch, resolveOffset, heartbeat }: EachBatchPayload): Promise<void> => {
    const rows: LedgerRow[] = [];
    for (const message of batch.messages) {
      const row = parse(message);
      if (row) rows.push(row);
      else log.warn({ partition: batch.partition, offset: message.offset }, 'skipping a message that is not an order event');
    }
    const inserted = rows.length ? await record(pool, rows) : 0;
    const last = batch.messages[batch.messages.length - 1].offset;
    resolveOffset(last);
    // Committed after the insert: a crash before this line redelivers the batch, which inserts nothing new.
    await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: String(BigInt(last) + 1n) }]);
    await heartbeat();
    log.debug({ partition: batch.partition, received: batch.messages.length, inserted }, 'ledger batch recorded');
  };
  await consumer.connect();
  try {
    await consumer.subscribe({ topic: config.KAFKA_TOPIC, fromBeginning: options.fromBeginning ?? true });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: async (payload) => {
        if (payload.batch.messages.length === 0) return;
        await inSpan(`process ${payload.batch.topic}`, batchSpan(payload.batch), () => recordBatch(payload));
      },
    });
  } catch (err) {
    await consumer.disconnect().catch(() => undefined);
    throw err;
  }
  return { consumer, stop: () => consumer.disconnect() };
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL, 'ledger');
  const tracing = startTracing(config, 'ledger', log);
  const pool = createPool(config, (err) => log.warn({ err }, 'postgres idle client error'));
  const ledger = await startLedger(config, pool, { log });
  log.info({ topic: config.KAFKA_TOPIC, groupId: LEDGER_GROUP_ID }, 'ledger running');
  onShutdown(log, 'shutting down', () => ledger.stop().then(() => pool.end()), tracing);
}

if (require.main === module) runMain('ledger', main);
