/** A run's plan, a function of its seed alone: the faults it draws, when, for how long, on what. */
import { Random } from './random';

export type FaultKind =
  | 'api-kill'
  | 'worker-kill'
  | 'redis-kill'
  | 'redis-script-flush'
  | 'kafka-stop'
  | 'postgres-restart-fast'
  | 'postgres-restart-immediate'
  | 'temporal-restart'
  | 'temporal-freeze'
  | 'temporal-drop'
  | 'temporal-latency'
  | 'redis-master-kill'
  | 'redis-reshard'
  | 'redis-connections-drop'
  | 'redis-shard-loss'
  | 'shard-loss-workers-stopped'
  | 'temporal-history-kill'
  | 'temporal-frontend-restart'
  | 'redis-failover-lost-writes'
  | 'kafka-broker-kill'
  | 'kafka-leader-move'
  | 'kafka-brokers-down';

/** How often each kind is drawn (Kafka's is rare: it lasts longer than the activity timeout, 30 s). */
const FAULT_WEIGHTS: [FaultKind, number][] = [
  ['api-kill', 4],
  ['worker-kill', 4],
  ['redis-kill', 3],
  ['redis-script-flush', 2],
  ['kafka-stop', 1],
  ['postgres-restart-fast', 2],
  ['postgres-restart-immediate', 2],
  ['temporal-restart', 2],
  ['temporal-freeze', 2],
  ['temporal-drop', 2],
  ['temporal-latency', 2],
];
/**
 * On the Redis Cluster (`--cluster`): the single node's faults give way to a master SIGKILLed (its replica takes
 * over; the node comes back as a replica), the slot of one of the sale's shards migrated to another master
 * while the sale goes on (ASK, then MOVED; moved back as the repair), every client connection of the masters
 * closed every 20 ms (replies of scripts Redis ran are lost), one shard's keys deleted at once, as a master
 * restarted empty would lose them, then rebuilt (forced: the other shards kept theirs) as docs/operations.md says,
 * and a failover that loses writes: a shard's replica stalled and cut off while presses, releases and controls go
 * on, its master killed, the replica resumed and promoted without what it missed (the reconciler's to repair).
 */
const CLUSTER_FAULT_WEIGHTS: [FaultKind, number][] = [
  ...FAULT_WEIGHTS.filter(([kind]) => kind !== 'redis-kill'),
  ['redis-master-kill', 3],
  ['redis-reshard', 3],
  ['redis-connections-drop', 3],
  ['redis-shard-loss', 2],
  ['redis-failover-lost-writes', 6],
];
/**
 * On the real Temporal server (`--temporal-server`): the dev server's restart gives way to the history service
 * SIGKILLed (its shards' owner gone mid-write; it starts again on the same database) and the frontend stopped
 * and started (every client's calls fail over to retries).
 */
const SERVER_FAULT_WEIGHTS: [FaultKind, number][] = [
  ...FAULT_WEIGHTS.filter(([kind]) => kind !== 'temporal-restart'),
  ['temporal-history-kill', 4],
  ['temporal-frontend-restart', 3],
];

/**
 * On the three-broker Kafka cluster (`--kafka-cluster`): the single broker's stop gives way to the broker leading
 * the sale's partition SIGKILLed (another in-sync replica leads; it starts again with its data), that partition's
 * leadership moved by a reassignment, and two brokers SIGKILLed for a while (below min.insync.replicas and the
 * controllers' quorum: no event is written until they are back, the outbox holds them).
 */
const KAFKA_FAULT_WEIGHTS: [FaultKind, number][] = [
  ...FAULT_WEIGHTS.filter(([kind]) => kind !== 'kafka-stop'),
  ['kafka-broker-kill', 4],
  ['kafka-leader-move', 3],
  ['kafka-brokers-down', 2],
];

/** The stack a campaign runs on, which chooses its faults: the single node's, the Redis Cluster's, the real Temporal server's or the Kafka cluster's. */
export type FaultSet = 'node' | 'cluster' | 'server' | 'kafka';

const FAULT_SETS: Record<FaultSet, [FaultKind, number][]> = { node: FAULT_WEIGHTS, cluster: CLUSTER_FAULT_WEIGHTS, server: SERVER_FAULT_WEIGHTS, kafka: KAFKA_FAULT_WEIGHTS };
/**
 * Both workers SIGKILLed, then one shard's data lost (a one-node sale's only shard) and rebuilt while they are
 * down, then the workers started again: the orders the starters stored and started meanwhile wait in Temporal,
 * known to PostgreSQL only. Drawn apart from the weighted bag, on a generator of its own, so that every seed
 * keeps the plan it had before this fault existed (the CI seeds' and the ones that found violations).
 */
const SHARD_LOSS_IDLE: { sets: readonly FaultSet[]; chance: number } = { sets: ['node', 'cluster'], chance: 0.25 };
/** Every kind a fault set may draw. */
export const faultKinds = (set: FaultSet): FaultKind[] => [...FAULT_SETS[set].map(([kind]) => kind), ...(SHARD_LOSS_IDLE.sets.includes(set) ? ['shard-loss-workers-stopped' as const] : [])];

/** @returns the seed's shard-loss-workers-stopped fault, if it draws one (on its own generator) */
function planShardLossIdle(seed: number, set: FaultSet): PlannedFault[] {
  if (!SHARD_LOSS_IDLE.sets.includes(set)) return [];
  // A seed of its own, mixed (Knuth's multiplicative hash): nearby seeds start xoroshiro128+ on nearby states.
  const rng = new Random(Math.imul(seed ^ 0x5eed, 0x9e3779b1) >>> 0);
  return rng.chance(SHARD_LOSS_IDLE.chance) ? [{ kind: 'shard-loss-workers-stopped', atMs: rng.int(0, 7000), forMs: rng.int(1000, 5000), target: rng.int(0, 2) }] : [];
}

/** Longer than the publishing local activity's start-to-close timeout. */
const KAFKA_OUTAGE_MS = 35_000;
export interface PlannedFault {
  kind: FaultKind;
  /** ms after the run's sale opened. */
  atMs: number;
  /** How long the fault lasts before its repair, ms. */
  forMs: number;
  /** Which of the two APIs or workers, for the process faults. */
  target: number;
}

/** Draws a run's faults from the set's kinds: one to three, at moments within the crowd and the payments. */
export function planFaults(rng: Random, set: FaultSet = 'node'): PlannedFault[] {
  const bag = FAULT_SETS[set].flatMap(([kind, weight]) => Array<FaultKind>(weight).fill(kind));
  return Array.from({ length: rng.int(1, 3) }, () => {
    const kind = rng.pick(bag);
    const forMs = kind === 'kafka-stop' ? KAFKA_OUTAGE_MS : kind === 'temporal-latency' ? rng.int(3000, 6000) : kind === 'kafka-brokers-down' ? rng.int(5000, 20_000) : rng.int(1000, 5000);
    return { kind, atMs: rng.int(0, 7000), forMs, target: rng.int(0, 1) };
  }).sort((a, b) => a.atMs - b.atMs);
}

export interface RunPlan {
  rng: Random;
  windowMs: number;
  priceMinor: number;
  /** Units of each item of the run's sale. */
  quantities: number[];
  faults: PlannedFault[];
}

/** @returns the run's plan for a seed on a fault set: the same for the same seed, every time */
export function planRun(seed: number, set: FaultSet): RunPlan {
  const rng = new Random(seed);
  const windowMs = rng.int(3000, 6000);
  const priceMinor = rng.int(500, 5000);
  const quantities = Array.from({ length: rng.int(2, 3) }, () => rng.int(10, 30));
  const faults = [...planFaults(rng, set), ...planShardLossIdle(seed, set)].sort((a, b) => a.atMs - b.atMs);
  return { rng, windowMs, priceMinor, quantities, faults };
}

/** One run: a sale, its crowd, payments and faults, then the checks. */
