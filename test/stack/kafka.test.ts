/**
 * Kafka as scripts/services.sh runs it: the orders topic (stack.env's and the suites') exists with its partitions,
 * a message produced with acks from all replicas comes back to a fresh consumer group, and a topic nobody created
 * stays uncreated (auto.create.topics.enable=false: a typo in a topic name must fail loudly), and the pinned
 * kafkajs, patched at install, leaves no timer spinning while idle.
 */
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, Partitioners, type Admin, type Consumer, type Producer } from 'kafkajs';
import { readStackEnvDefaults, stackEnv } from '../../scripts/stack-env';

const env = stackEnv();
// The suites' topic takes this suite's messages; the stack's own (services.sh creates it) is only read.
const topic = env.KAFKA_TOPIC;
const stackTopic = readStackEnvDefaults().KAFKA_TOPIC;
const brokers = [`127.0.0.1:${env.KAFKA_PORT}`];
const kafka = new Kafka({ clientId: 'stack-test', brokers, logLevel: logLevel.WARN });

let admin: Admin;
let producer: Producer;
const consumers: Consumer[] = [];
const groups: string[] = [];

beforeAll(async () => {
  admin = kafka.admin();
  producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  await Promise.all([admin.connect(), producer.connect()]);
});

afterAll(async () => {
  await Promise.allSettled(consumers.map((consumer) => consumer.disconnect()));
  await admin.deleteGroups(groups).catch(() => undefined); // best effort: keep the broker tidy
  await Promise.allSettled([producer.disconnect(), admin.disconnect()]);
});

test.each([stackTopic, topic])('topic %s exists with KAFKA_TOPIC_PARTITIONS partitions', async (name) => {
  const metadata = await admin.fetchTopicMetadata({ topics: [name] });
  expect(metadata.topics[0].partitions).toHaveLength(Number(env.KAFKA_TOPIC_PARTITIONS));
});

test('a produced message is consumed by a fresh consumer group', async () => {
  const key = randomUUID();
  const value = JSON.stringify({ test: 'stack', key });
  const [sent] = await producer.send({ topic, acks: -1, messages: [{ key, value }] });
  const { partition, baseOffset: offset } = sent;
  if (offset === undefined) throw new Error('the broker acknowledged the send without an offset');

  const groupId = `stack-test-${randomUUID()}`;
  groups.push(groupId);
  // A short fetch wait: disconnect() waits for the fetch in flight.
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200 });
  consumers.push(consumer);
  await consumer.connect();
  await consumer.subscribe({ topics: [topic] });
  // Other suites may publish to the same topic meanwhile: wait for our key only.
  const received = new Promise<{ partition: number; offset: string; value: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`message ${key} not consumed within 30 s`)), 30_000);
    consumer
      .run({
        eachMessage: async ({ partition: from, message }) => {
          if (message.key?.toString() !== key) return;
          clearTimeout(timer);
          resolve({ partition: from, offset: message.offset, value: message.value?.toString() ?? '' });
        },
      })
      // A seek right after run() is where the new group starts on that partition (kafkajs applies it at join).
      .then(() => consumer.seek({ topic, partition, offset }))
      .catch(reject);
  });

  expect(await received).toEqual({ partition, offset, value });
});

test('producing to a topic that was never created fails, and does not create it', async () => {
  const missing = `stack-test-missing-${randomUUID()}`;
  // A separate client: it asks the broker to auto-create (the kafkajs default) and its expected errors stay quiet.
  const quiet = new Kafka({ clientId: 'stack-test-missing', brokers, logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 } });
  const eager = quiet.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: true });
  await eager.connect();
  try {
    await expect(eager.send({ topic: missing, messages: [{ key: 'k', value: 'v' }] })).rejects.toThrow(
      /does not host this topic-partition/,
    );
  } finally {
    await eager.disconnect();
  }
  expect(await admin.listTopics()).not.toContain(missing);
});

test('an idle kafkajs client arms no timer with a negative delay (patches/kafkajs+2.2.4.patch, kafkajs#1751)', async () => {
  // Unpatched, each broker connection's request queue re-armed a check every 1 ms while it had nothing pending
  // (a negative delay that Node clamps to 1 ms, with a TimeoutNegativeWarning): a spin in every process.
  const negative: number[] = [];
  const realSetTimeout = global.setTimeout;
  const counting = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    if (ms !== undefined && ms < 0) negative.push(ms);
    return realSetTimeout(callback, ms, ...args);
  }) as typeof setTimeout;
  global.setTimeout = Object.assign(counting, realSetTimeout);
  const idle = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  try {
    await idle.connect();
    await idle.send({ topic, acks: -1, messages: [{ key: randomUUID(), value: '{"test":"idle"}' }] });
    await new Promise((resolve) => realSetTimeout(resolve, 300));
  } finally {
    global.setTimeout = realSetTimeout;
    await idle.disconnect();
  }
  expect(negative).toEqual([]);
});
