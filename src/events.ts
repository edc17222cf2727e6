/**
 * Order events on Kafka (kafkajs): topic flash-sale-orders, key = itemId for per-item ordering, acks from all
 * in-sync replicas, retries. Duplicates are harmless because every event carries its eventId (I5).
 */
import { Kafka, logLevel, Partitioners, type Producer } from 'kafkajs';
import type { Config } from './config';
import { createLogger } from './logger';
import type { OrderEvent } from './domain';

/**
 * Bounds of one publish, retries included: each request gives up after PUBLISH_REQUEST_TIMEOUT_MS, and at
 * most PUBLISH_RETRIES retries follow, waiting 250 ms doubling up to 2 s between them (±20%). Worst case about
 * 5 × 3 s + 4.5 s ≈ 20 s, under the 30 s timeout of the local activity that publishes: the activity's retry
 * never starts while kafkajs still retries the attempt before it, so an attempt that gave up sends nothing
 * later (the broker stopped for longer than the activity timeout once landed up to 3 copies, one after the
 * order's final event).
 */
const PUBLISH_REQUEST_TIMEOUT_MS = 3000;
const PUBLISH_RETRIES = 4;

/**
 * Kafka client for the configured broker(s).
 * @param requestTimeoutMs how long one request may wait for the broker (the publisher's is short, see above)
 */
export function createKafka(config: Config, clientId: string, requestTimeoutMs = 30_000): Kafka {
  const log = createLogger(config.LOG_LEVEL, clientId);
  return new Kafka({
    clientId,
    brokers: [`${config.KAFKA_HOST}:${config.KAFKA_PORT}`],
    logLevel: logLevel.WARN,
    // kafkajs' warnings and errors as our structured logs (LOG_LEVEL), not on the console.
    logCreator:
      () =>
      ({ namespace, level, log: { message, ...fields } }) => {
        const entry = { kafkajs: namespace, ...fields };
        if (level === logLevel.ERROR) log.error(entry, message);
        else log.warn(entry, message);
      },
    requestTimeout: requestTimeoutMs,
    retry: { initialRetryTime: 100, retries: 8 },
  });
}

/** Kafka client for an EventPublisher: requests bounded as the publish deadline above needs. */
export function createPublisherKafka(config: Config, clientId: string): Kafka {
  return createKafka(config, clientId, PUBLISH_REQUEST_TIMEOUT_MS);
}

/** Publishes order events; each publish resolves once all in-sync replicas have the message. */
export class EventPublisher {
  private constructor(
    private readonly producer: Producer,
    private readonly topic: string,
  ) {}

  /**
   * Connects a producer. With idempotent=true, kafkajs' idempotent producer with one request in flight
   * (more in flight has failed with OUT_OF_ORDER_SEQUENCE_NUMBER); otherwise a plain producer whose retried
   * duplicates consumers drop by eventId.
   */
  static async connect(kafka: Kafka, topic: string, idempotent: boolean): Promise<EventPublisher> {
    // The default (murmur2) partitioner, as Java clients use, so a key lands where other producers put it.
    const common = {
      allowAutoTopicCreation: false,
      createPartitioner: Partitioners.DefaultPartitioner,
      retry: { retries: PUBLISH_RETRIES, initialRetryTime: 250, maxRetryTime: 2000 },
    };
    const producer = kafka.producer(idempotent ? { ...common, idempotent: true, maxInFlightRequests: 1 } : common);
    await producer.connect();
    return new EventPublisher(producer, topic);
  }

  /**
   * @throws kafkajs errors after its retries are spent, within about 20 s (the calling activity is then retried
   *   by Temporal)
   */
  async publish(event: OrderEvent): Promise<void> {
    await this.producer.send({
      topic: this.topic,
      acks: -1,
      messages: [{ key: String(event.itemId), value: JSON.stringify(event), headers: { eventId: event.eventId, type: event.type } }],
    });
  }

  async disconnect(): Promise<void> {
    await this.producer.disconnect();
  }
}
