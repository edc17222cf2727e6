/**
 * Order events on Kafka (kafkajs): topic flash-sale-orders, key = itemId for per-item ordering, acks from all
 * in-sync replicas, retries. Duplicates are harmless because every event carries its eventId (I5).
 */
import { Kafka, logLevel, Partitioners, type Producer } from 'kafkajs';
import type { Config } from './config';
import { createLogger } from './logger';
import type { OrderEvent } from './domain';

/** Retries of a client whose every request must get through in the end (the publisher's, see EventPublisher). */
export const UNTIL_ANSWERED = { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 300, maxRetryTime: 2000 };

/**
 * Kafka client for the configured broker(s).
 * @param retry kafkajs' retries of the client's requests (connecting, metadata): 8 by default
 */
export function createKafka(config: Config, clientId: string, retry: { retries: number; initialRetryTime: number; maxRetryTime?: number } = { initialRetryTime: 100, retries: 8 }): Kafka {
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
    retry,
  });
}

/**
 * Publishes order events; each publish resolves once all in-sync replicas have the message.
 *
 * One send per event at a time: the local activity that publishes may time out (30 s) and run again while
 * the broker is away, and a second send of the same event beside the first lands a copy, maybe after the
 * order's final event. A deadline of the publisher's own, shorter than the activity's, did not stop that: a
 * send that gives up while a request is in doubt (written to a broker that restarts, its answer lost) may
 * still have landed, and the retry lands it again (seen in test/workflow/kafka-outage.test.ts). So a send is
 * never abandoned: on a client made with UNTIL_ANSWERED retries (connecting included) the idempotent producer
 * retries it until the broker answers, with the same sequence number, which the broker drops if it has it
 * already; and a publish of an event whose send is on its way joins that send instead of starting another.
 */
export class EventPublisher {
  /** Sends on their way, by eventId. */
  private readonly sending = new Map<string, Promise<void>>();

  private constructor(
    private readonly producer: Producer,
    private readonly topic: string,
  ) {}

  /**
   * Connects a producer. With idempotent=true, kafkajs' idempotent producer with one request in flight
   * (more in flight has failed with OUT_OF_ORDER_SEQUENCE_NUMBER), retrying each send until the broker answers
   * (waits of 300 ms growing to 2 s); otherwise a plain producer, with kafkajs' five retries, whose retried
   * duplicates consumers drop by eventId.
   */
  static async connect(kafka: Kafka, topic: string, idempotent: boolean): Promise<EventPublisher> {
    // The default (murmur2) partitioner, as Java clients use, so a key lands where other producers put it.
    const common = { allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner };
    const producer = kafka.producer(
      idempotent
        ? { ...common, idempotent: true, maxInFlightRequests: 1, retry: UNTIL_ANSWERED }
        : common,
    );
    await producer.connect();
    return new EventPublisher(producer, topic);
  }

  /**
   * Sends the event, or joins its send already on its way.
   * @throws kafkajs errors the producer does not retry (or, not idempotent, after its retries)
   */
  publish(event: OrderEvent): Promise<void> {
    return this.publishAll([event]);
  }

  /**
   * Sends the events in one produce request, in order (those of one item on one partition, so consumers see
   * them in that order), joining any whose send is already on its way. One request for an order's events
   * instead of one each: the idempotent producer has one request in flight, so every request waits for the
   * ones before it.
   * @throws kafkajs errors the producer does not retry (or, not idempotent, after its retries)
   */
  publishAll(events: OrderEvent[]): Promise<void> {
    const fresh = events.filter((e) => !this.sending.has(e.eventId));
    const joined = events.map((e) => this.sending.get(e.eventId)).filter((p): p is Promise<void> => p !== undefined);
    if (!fresh.length) return Promise.all(joined).then(() => undefined);
    const send = this.producer
      .send({
        topic: this.topic,
        acks: -1,
        messages: fresh.map((e) => ({ key: String(e.itemId), value: JSON.stringify(e), headers: { eventId: e.eventId, type: e.type } })),
      })
      .then(() => undefined)
      .finally(() => {
        for (const e of fresh) this.sending.delete(e.eventId);
      });
    for (const e of fresh) this.sending.set(e.eventId, send);
    return Promise.all([...joined, send]).then(() => undefined);
  }

  async disconnect(): Promise<void> {
    await this.producer.disconnect();
  }
}
