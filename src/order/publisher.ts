/**
 * Order events on Kafka (kafkajs): topic flash-sale-orders, key = itemId for per-item ordering, acks from all
 * in-sync replicas, retries. Duplicates are harmless because every event carries its eventId (I5). With tracing
 * on, a message's headers carry its publish span's W3C traceparent.
 */
import { context, propagation, SpanKind, SpanStatusCode, trace as otelTrace, type Context } from '@opentelemetry/api';
import { Partitioners, type Kafka, type Producer } from 'kafkajs';
import { UNTIL_ANSWERED } from '../infra/kafka';
import { ATTR, contextOf, tracer } from '../tracing';
import type { OrderEvent, OrderEventType } from './events';

/** Most events in one produce request: a few hundred bytes each, far below the broker's 1 MB request limit. */
const MAX_EVENTS_PER_REQUEST = 500;

/** An event as the outbox keeps it (src/order/outbox.ts): its JSON as written, and the traceparent of its writer. */
export interface StoredEvent {
  eventId: string;
  type: OrderEventType;
  orderId: string;
  itemId: number;
  payload: string;
  traceParent?: string;
}

interface Waiting {
  event: StoredEvent;
  /** The W3C trace context of the event's publish span (empty with tracing off), as message headers. */
  trace: Record<string, string>;
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * Publishes order events; each publish resolves once all in-sync replicas have the message. One produce request
 * at a time (the idempotent producer keeps one in flight), carrying the waiting events of one item: one key, one
 * partition, one leader, since a kafkajs 2.2.4 call that spans leaders may resolve without some of its messages
 * (docs/design.md, "One item per produce request"). A send is never abandoned: one given up while its answer was
 * lost may still land, and its retry lands a copy (test/e2e/kafka-outage.test.ts). So the producer retries it until the
 * broker answers, with the sequence number the broker de-duplicates, and a publish of an event already waiting or
 * on its way joins it.
 */
export class EventPublisher {
  /** Events waiting or on their way, by eventId. */
  private readonly sending = new Map<string, Promise<void>>();
  private waiting: Waiting[] = [];
  private inFlight = false;

  private constructor(
    private readonly producer: Producer,
    private readonly topic: string,
  ) {}

  /**
   * Connects a producer: kafkajs' idempotent producer with one request in flight (more in flight has failed with
   * OUT_OF_ORDER_SEQUENCE_NUMBER), retrying each send until the broker answers (waits of 300 ms growing to 2 s),
   * which spares consumers the producer's own duplicates.
   * @param idempotent false only for tools/bench/kafka.ts's baseline: a plain producer, with kafkajs' five retries
   */
  static async connect(kafka: Kafka, topic: string, idempotent = true): Promise<EventPublisher> {
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
   * Sends the event, or joins its send already waiting or on its way (its span the child of the active one).
   * @throws kafkajs errors the producer does not retry (or, not idempotent, after its retries)
   */
  publish(event: OrderEvent): Promise<void> {
    return this.publishAll([event]);
  }

  /**
   * Sends the events in order, one request per item (those of one item go to one partition, so consumers see
   * them in this order), joining any already waiting or on its way.
   * @throws kafkajs errors the producer does not retry (or, not idempotent, after its retries)
   */
  publishAll(events: OrderEvent[]): Promise<void> {
    const parent = context.active();
    return this.send(events.map((e) => ({ eventId: e.eventId, type: e.type, orderId: e.orderId, itemId: e.itemId, payload: JSON.stringify(e) })), () => parent);
  }

  /**
   * Sends events the outbox stored, in order, as publishAll does; each publish span is the child of the span
   * that wrote its event (its traceParent), so an order's trace reaches its events.
   */
  publishStored(events: StoredEvent[]): Promise<void> {
    return this.send(events, (e) => contextOf(e.traceParent));
  }

  private send(events: StoredEvent[], parentOf: (event: StoredEvent) => Context): Promise<void> {
    const sends = events.map((event) => {
      const onItsWay = this.sending.get(event.eventId);
      if (onItsWay) return onItsWay;
      const send = new Promise<void>((resolve, reject) => this.waiting.push({ event, ...this.traced(event, parentOf(event), resolve, reject) }));
      this.sending.set(event.eventId, send);
      const forget = () => this.sending.delete(event.eventId);
      send.then(forget, forget);
      return send;
    });
    this.sendWaiting();
    return Promise.all(sends).then(() => undefined);
  }

  /**
   * A PRODUCER span for the event, the child of the caller's (the activity's, with tracing on), from its wait to
   * the broker's answer; its context goes in the message's headers, so a consumer can join the order's trace.
   */
  private traced(event: StoredEvent, parent: Context, resolve: () => void, reject: (err: unknown) => void): Omit<Waiting, 'event'> {
    const span = tracer.startSpan(
      `publish ${this.topic}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: { 'messaging.system': 'kafka', 'messaging.operation.type': 'publish', 'messaging.destination.name': this.topic, 'messaging.message.id': event.eventId, [ATTR.orderId]: event.orderId },
      },
      parent,
    );
    const trace: Record<string, string> = {};
    propagation.inject(otelTrace.setSpan(parent, span), trace);
    return {
      trace,
      resolve() {
        span.end();
        resolve();
      },
      reject(err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message }).end();
        reject(err);
      },
    };
  }

  /** Sends what waits for the first waiting event's item, once no request is in flight, then what waits still. */
  private sendWaiting(): void {
    if (this.inFlight || !this.waiting.length) return;
    const batch = takeOneItem(this.waiting);
    this.inFlight = true;
    this.producer
      .send({
        topic: this.topic,
        acks: -1,
        messages: batch.map(({ event, trace }) => ({ key: String(event.itemId), value: event.payload, headers: { eventId: event.eventId, type: event.type, ...trace } })),
      })
      .then(
        () => batch.forEach((w) => w.resolve()),
        (err: unknown) => batch.forEach((w) => w.reject(err)),
      )
      .finally(() => {
        this.inFlight = false;
        this.sendWaiting();
      });
  }

  async disconnect(): Promise<void> {
    await this.producer.disconnect();
  }
}

/**
 * Takes out of `waiting` the events of its first event's item, in order, at most MAX_EVENTS_PER_REQUEST: one
 * key, so one partition and one leader per produce request (EventPublisher). The others keep their order.
 * @returns the events taken
 */
export function takeOneItem<T extends { event: Pick<StoredEvent, 'itemId'> }>(waiting: T[]): T[] {
  const itemId = waiting[0]?.event.itemId;
  const taken: T[] = [];
  const kept: T[] = [];
  for (const w of waiting) (w.event.itemId === itemId && taken.length < MAX_EVENTS_PER_REQUEST ? taken : kept).push(w);
  waiting.splice(0, waiting.length, ...kept);
  return taken;
}
