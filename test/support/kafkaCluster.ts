/**
 * The local three-broker Kafka cluster of `scripts/services.sh up --kafka-cluster` (scripts/kafka-cluster-stack.sh),
 * as the suites of test/kafka/ use it: its brokers, a suite's own topic on it (replicated on all three,
 * min.insync.replicas 2), the broker leading a key's partition, its leadership moved, and a broker killed and
 * started again.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Kafka, logLevel, Partitioners, type Admin } from 'kafkajs';
import { ensureTopic } from '../../scripts/kafka-topics';
import { stackEnv } from '../../scripts/stack-env';

const ROOT = join(__dirname, '..', '..');
const DIR = join(ROOT, '.local', 'kafka-cluster');

/** @returns the cluster's brokers (host:port,…) as services.sh wrote them, or undefined when it was never started */
export function clusterBrokersIfUp(): string | undefined {
  const env = join(DIR, 'kafka-cluster.env');
  return existsSync(env) ? /^KAFKA_BROKERS=(.+)$/m.exec(readFileSync(env, 'utf8'))?.[1] : undefined;
}

/** @returns the cluster's brokers (host:port,…); @throws when it was never started (npm test starts it) */
export function clusterBrokers(): string {
  const brokers = clusterBrokersIfUp();
  if (!brokers) throw new Error(`${join(DIR, 'kafka-cluster.env')} is missing: run bash scripts/services.sh up --kafka-cluster`);
  return brokers;
}

/** Creates the suite's topic on the cluster with the stack's partition count: replication factor 3, min.insync.replicas 2. */
export async function ensureClusterTopic(topic: string): Promise<void> {
  // A fresh cluster answers UNKNOWN_TOPIC_OR_PARTITION for a while beyond the client's retries (services.sh too).
  for (let attempt = 1; ; attempt++) {
    try {
      await ensureTopic(clusterBrokers().split(','), topic, Number(stackEnv().KAFKA_TOPIC_PARTITIONS), 3);
      return;
    } catch (err) {
      if (attempt === 5) throw err;
      await new Promise((r) => setTimeout(r, 3000));
    }
  }
}

/**
 * Runs `work` with an admin client of the cluster, disconnected after it. Its requests are retried for about
 * 30 s: a broker just killed is named in the metadata until the controller fences it (about 9 s), then leads
 * nothing.
 */
async function withAdmin<T>(work: (admin: Admin) => Promise<T>): Promise<T> {
  const retry = { retries: 15, initialRetryTime: 300, maxRetryTime: 3000 };
  const admin = new Kafka({ clientId: 'test-cluster-admin', brokers: clusterBrokers().split(','), logLevel: logLevel.NOTHING, retry }).admin();
  await admin.connect();
  try {
    return await work(admin);
  } finally {
    await admin.disconnect();
  }
}

/** @returns the partition a message keyed `key` goes to (kafkajs' default partitioner, as the publisher's), its replicas and leader */
async function partitionOf(admin: Admin, topic: string, key: string): Promise<{ partition: number; replicas: number[]; leader: number }> {
  const [{ partitions }] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
  const partition = Partitioners.DefaultPartitioner()({ topic, partitionMetadata: partitions, message: { key, value: null } });
  const found = partitions.find((p) => p.partitionId === partition);
  if (!found) throw new Error(`partition ${partition} of ${topic} not in its metadata`);
  return { partition, replicas: found.replicas, leader: found.leader };
}

/** @returns the node id (1-3) of the broker that leads the partition a message keyed `key` goes to */
export async function leaderOf(topic: string, key: string): Promise<number> {
  return withAdmin(async (admin) => (await partitionOf(admin, topic, key)).leader);
}

/**
 * Moves the leadership of the partition a message keyed `key` goes to, as an operator's reassignment does
 * (kafka-reassign-partitions): its leader is dropped from its replicas, so another in-sync replica leads, then
 * added back last, so that it stays a follower and the partition has its three replicas again.
 * @returns the old leader and the new one
 */
export async function moveLeader(topic: string, key: string): Promise<{ from: number; to: number }> {
  return withAdmin(async (admin) => {
    const { partition, leader } = await partitionOf(admin, topic, key);
    // The other two of the cluster's three, not the replicas now listed: a move that an earlier one interrupted
    // still ends with the partition on all three.
    const others = [1, 2, 3].filter((node) => node !== leader);
    const reassign = async (target: number[]) => {
      await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition, replicas: target }] }] });
      for (let i = 0; ; i++) {
        const ongoing = (await admin.listPartitionReassignments({ topics: [{ topic, partitions: [partition] }] })).topics.flatMap((t) => t.partitions);
        if (ongoing.length === 0 && (await partitionOf(admin, topic, key)).replicas.length === target.length) return;
        if (i > 300) throw new Error(`reassignment of ${topic}/${partition} to ${target.join(',')} not done in 30 s`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    await reassign(others);
    await reassign([...others, leader]);
    return { from: leader, to: (await partitionOf(admin, topic, key)).leader };
  });
}

/**
 * @returns the node id (1-3) of the broker coordinating consumer group `groupId`: the leader of its partition of
 *   __consumer_offsets (Java's String.hashCode of the id, made non-negative, modulo the topic's 50 partitions)
 */
export async function coordinatorOf(groupId: string): Promise<number> {
  let hash = 0;
  for (const unit of groupId) hash = (Math.imul(31, hash) + unit.charCodeAt(0)) | 0;
  return withAdmin(async (admin) => {
    const [{ partitions }] = (await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] })).topics;
    const leader = partitions.find((p) => p.partitionId === (hash & 0x7fffffff) % partitions.length)?.leader;
    if (leader === undefined) throw new Error(`no coordinator for group ${groupId}`);
    return leader;
  });
}

/**
 * SIGKILLs broker `node` (1-3), as a crash of its machine: no controlled shutdown, no leadership handed over. A
 * broker already down (killed by an earlier fault, not yet started again) is left so.
 */
export function killBroker(node: number): void {
  try {
    process.kill(Number(readFileSync(join(DIR, String(node), 'kafka.pid'), 'utf8').trim()), 'SIGKILL');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** Starts what is down again (services.sh up: the killed broker, which rejoins with its data), and waits for it. */
export async function restartBrokers(): Promise<void> {
  // Without the suites' environment: services.sh would otherwise take their topic for the stack's.
  await promisify(execFile)('bash', [join(ROOT, 'scripts', 'services.sh'), 'up'], { timeout: 300_000, env: { PATH: process.env.PATH, HOME: process.env.HOME, CI: process.env.CI } });
}
