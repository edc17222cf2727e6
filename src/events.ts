/**
 * Order events on Kafka (kafkajs): topic flash-sale-orders, key = itemId for per-item ordering, acks from all
 * in-sync replicas, retries. Duplicates are harmless because every event carries its eventId (I5).
 */
import { Kafka, logLevel, Partitioners, type Producer } from 'kafkajs';
import type { Config } from './config';
import type { OrderEvent } from './domain';

/** Kafka client for the configured broker(s). */
export function createKafka(config: Config, clientId: string): Kafka {
  return new Kafka({
    clientId,
    brokers: [`${config.KAFKA_HOST}:${config.KAFKA_PORT}`],
    logLevel: logLevel.WARN,
    retry: { initialRetryTime: 100, retries: 8 },
  });
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
    const common = { allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner };
    const producer = kafka.producer(idempotent ? { ...common, idempotent: true, maxInFlightRequests: 1 } : common);
    await producer.connect();
    return new EventPublisher(producer, topic);
  }

  /** @throws kafkajs errors after its retries are spent (the calling activity is then retried by Temporal) */
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
