/**
 * Creates the orders topic on the local broker, idempotently: the broker runs with
 * auto.create.topics.enable=false (docs/design.md: topics are created up front, never auto-created).
 * Then waits for the group coordinator, so the broker is ready for consumer groups too.
 * Run by scripts/services.sh after the broker listens:  npx tsx scripts/kafka-topics.ts; the test suites'
 * set-up (test/support/environment.ts) calls ensureTopic for their own topic.
 * Settings come from scripts/stack.env (environment wins). Prints one line; exits 1 on failure.
 */
import { Kafka, logLevel } from 'kafkajs';
import { stackEnv } from './stack-env';

/**
 * Creates `topic` with `partitions` partitions on the brokers (host:port seeds) unless it exists, grows it when
 * it has fewer, then waits for the group coordinator. With `replicas` above 1 (the three-broker cluster), the topic
 * is created with that replication factor and min.insync.replicas one less, so that an acknowledged event
 * (acks=all) is on two brokers and one broker may be lost.
 * @returns "created", "exists" or "grown from N"
 * @throws when the topic has more partitions than asked (Kafka cannot shrink one) or the broker does not answer
 */
export async function ensureTopic(brokers: string[], topic: string, partitions: number, replicas = 1): Promise<string> {
  if (!Number.isInteger(partitions) || partitions < 1) {
    throw new Error(`KAFKA_TOPIC_PARTITIONS must be a positive integer, got ${partitions}`);
  }
  const kafka = new Kafka({
    clientId: 'flash-sale-stack',
    brokers,
    logLevel: logLevel.NOTHING, // expected retries (coordinator loading) would read like failures; errors are thrown
    // The broker may have just opened its port; give it time to finish starting.
    retry: { retries: 10, initialRetryTime: 300 },
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    // Look first: createTopics on an existing topic works (answers false) but makes kafkajs log an error.
    const exists = (await admin.listTopics()).includes(topic);
    if (!exists) {
      await admin.createTopics({
        topics: [{ topic, numPartitions: partitions, replicationFactor: replicas, ...(replicas > 1 && { configEntries: [{ name: 'min.insync.replicas', value: String(replicas - 1) }] }) }],
        waitForLeaders: true,
      });
    }
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
    const existing = metadata.topics[0].partitions.length;
    let note = exists ? 'exists' : 'created';
    if (existing < partitions) {
      // Kafka can add partitions but never remove them; adding re-maps keys, acceptable on a dev stack.
      await admin.createPartitions({ topicPartitions: [{ topic, count: partitions }] });
      note = `grown from ${existing}`;
    } else if (existing > partitions) {
      throw new Error(
        `topic ${topic} has ${existing} partitions, more than KAFKA_TOPIC_PARTITIONS=${partitions}; ` +
          'Kafka cannot shrink a topic: set the setting back, or delete .local/kafka/data for a fresh broker',
      );
    }
    // A fresh broker creates __consumer_offsets (50 partitions) on the first group lookup, and until they are
    // loaded a consumer's join fails with "not the correct coordinator" and soon gives up. Look a group up here
    // (kafkajs retries while the coordinator is not available) so that the first real consumer finds it ready.
    await admin.describeGroups(['flash-sale-stack-readiness']);
    return note;
  } finally {
    await admin.disconnect();
  }
}

if (require.main === module) {
  const env = stackEnv();
  // The three-broker cluster's start (scripts/kafka-cluster-stack.sh) names its brokers and the replication.
  const brokers = process.env.KAFKA_BROKERS?.split(',') ?? [`127.0.0.1:${env.KAFKA_PORT}`];
  const replicas = Number(process.env.KAFKA_REPLICATION ?? 1);
  ensureTopic(brokers, env.KAFKA_TOPIC, Number(env.KAFKA_TOPIC_PARTITIONS), replicas).then(
    (note) => console.log(`topic ${env.KAFKA_TOPIC}: ${env.KAFKA_TOPIC_PARTITIONS} partitions, ${replicas} replicas (${note})`),
    (err: unknown) => {
      console.error(`kafka-topics: ${err instanceof Error ? err.message : String(err)}`);
      process.exit(1);
    },
  );
}
