/**
 * Benchmark of the event publisher choice (issue: idempotent producer vs eventId de-duplication): 10,000
 * order events published by 100 concurrent senders, as the worker's activities do, through EventPublisher (one
 * request in flight, carrying what waited) with kafkajs' idempotent producer and with the plain producer (acks
 * from all in-sync replicas either way).
 * The plain producer is the baseline; prints events/s and the ratio, asserts nothing.
 * With the local three-broker cluster up (`services.sh up --kafka-cluster`: topic on all three,
 * min.insync.replicas 2), the idempotent producer also publishes there, alternately with the configured broker,
 * three rounds each: events/s on three brokers against one (the medians' ratio).
 */
import { randomUUID } from 'node:crypto';
import { appendResult } from '../shared/benchResults';
import { loadConfig, type Config } from '../../src/config';
import { orderEvent } from '../../src/order/events';
import { createKafka } from '../../src/infra/kafka';
import { EventPublisher } from '../../src/order/publisher';
import { clusterBrokersIfUp } from '../../test/support/kafkaCluster';

export interface KafkaFigures {
  events: number;
  concurrency: number;
  plainPerS: number;
  idempotentPerS: number;
  ratio: number;
  /** The idempotent producer on the configured broker and on the three-broker cluster (median of three rounds each). */
  oneBrokerPerS?: number;
  threeBrokersPerS?: number;
  threeToOne?: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** @returns the idempotent producer's events/s on the brokers of `config`, after a warm-up */
async function idempotentRate(config: Config, events: number, concurrency: number): Promise<number> {
  const publisher = await EventPublisher.connect(createKafka(config, 'flash-sale-bench'), config.KAFKA_TOPIC, true);
  try {
    await publishAll(publisher, 200, concurrency);
    return await publishAll(publisher, events, concurrency);
  } finally {
    await publisher.disconnect();
  }
}

/** One broker against three, alternately, when the local cluster is up; undefined when it is not. */
async function brokersAB(config: Config, events: number, concurrency: number): Promise<Pick<KafkaFigures, 'oneBrokerPerS' | 'threeBrokersPerS' | 'threeToOne'>> {
  const brokers = clusterBrokersIfUp();
  if (!brokers) return {};
  const cluster = loadConfig({ ...process.env, LOG_LEVEL: 'silent', KAFKA_BROKERS: brokers });
  const one: number[] = [];
  const three: number[] = [];
  for (let round = 0; round < 3; round++) {
    one.push(await idempotentRate(config, events, concurrency));
    three.push(await idempotentRate(cluster, events, concurrency));
  }
  return { oneBrokerPerS: Math.round(median(one)), threeBrokersPerS: Math.round(median(three)), threeToOne: Math.round((median(three) / median(one)) * 1000) / 1000 };
}

async function publishAll(publisher: EventPublisher, events: number, concurrency: number): Promise<number> {
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < events) {
        const i = next++;
        const order = { orderId: randomUUID(), saleId: 0, itemId: 1 + (i % 4), userId: `bench-${i}` };
        await publisher.publish(orderEvent('OrderPlaced', order, new Date()));
      }
    }),
  );
  return events / (Number(process.hrtime.bigint() - t0) / 1e9);
}

/** Publishes to the configured topic with saleId 0, which no sale has (the audit never counts them). */
export async function benchKafka(events = 10_000, concurrency = 100): Promise<KafkaFigures> {
  const config = loadConfig({ ...process.env, LOG_LEVEL: 'silent' });
  const kafka = createKafka(config, 'flash-sale-bench');
  const rates: Record<string, number> = {};
  for (const idempotent of [false, true]) {
    const publisher = await EventPublisher.connect(kafka, config.KAFKA_TOPIC, idempotent);
    try {
      await publishAll(publisher, 200, concurrency);
      rates[String(idempotent)] = await publishAll(publisher, events, concurrency);
    } finally {
      await publisher.disconnect();
    }
  }
  return {
    events,
    concurrency,
    plainPerS: Math.round(rates.false),
    idempotentPerS: Math.round(rates.true),
    ratio: Math.round((rates.true / rates.false) * 1000) / 1000,
    ...(await brokersAB(config, events, concurrency)),
  };
}

if (require.main === module) {
  benchKafka().then(
    (f) => {
      console.log('\nevent publishing: idempotent producer vs plain producer');
      console.table(f);
      appendResult('kafka', f);
    },
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
