/**
 * Replication barriers: a 202 waits until REDIS_WAIT_REPLICAS replicas hold its reservation. WAIT blocks its
 * connection and counts that connection's writes only, so a barrier is a marker written on the node that ran the
 * script, then WAIT, on a connection of its own per node; replicas holding the marker hold every earlier write of
 * that node. Purchases ride on the barrier in flight or the next one: a stalled replica delays its node's purchases
 * by two WAIT timeouts at most.
 */
import Redis, { Cluster } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import type { Config } from '../config';
import { redisConnection } from '../infra/connections';
import { COMMAND_TIMEOUT_MS, nodeConnection } from './client';

/** How many replicas must hold a write, and how long to wait for them (ms). */
export interface Replication {
  replicas: number;
  timeoutMs: number;
}

/** Where a barrier runs: a node's address and a key of a slot that node serves. */
interface NodeTarget {
  host: string;
  port: number;
  key: string;
}

interface Lane {
  connection: Redis;
  key: string;
  waiting: ((replicas: number) => void)[];
  running: boolean;
}

/** A marker key's lifetime: long enough to be replicated, short enough to leave nothing behind (ms). */
const MARKER_TTL_MS = 600_000;

export class ReplicationBarrier {
  private readonly lanes = new Map<string, Lane>();
  private targets = new Map<string, NodeTarget>();
  private targetsRead: Promise<void> | undefined;

  private readonly replication: Replication;

  /**
   * @param redis the shared client, for the cluster's node map (CLUSTER NODES)
   * @param config REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT_MS, and how to reach a node (credentials, TLS, prefix)
   */
  constructor(
    private readonly redis: Redis | Cluster,
    private readonly config: Config,
  ) {
    this.replication = { replicas: config.REDIS_WAIT_REPLICAS, timeoutMs: config.REDIS_WAIT_TIMEOUT_MS };
  }

  /**
   * Waits until the asked replicas hold every write the node made before this call, or the WAIT timeout.
   * @param nodeId the cluster node that ran the write (CLUSTER MYID, from the script's reply); '' on a single Redis
   * @returns how many replicas acknowledged; 0 when the node is unknown, serves no slot, or the barrier failed
   *   (so the caller answers as not replicated, never the other way round)
   */
  async held(nodeId: string): Promise<number> {
    const lane = await this.laneOf(nodeId);
    if (!lane) return 0;
    return new Promise<number>((resolve) => {
      lane.waiting.push(resolve);
      if (!lane.running) void this.drive(lane, nodeId);
    });
  }

  /** Closes the barrier connections. */
  close(): void {
    for (const lane of this.lanes.values()) lane.connection.disconnect();
    this.lanes.clear();
  }

  private async drive(lane: Lane, nodeId: string): Promise<void> {
    lane.running = true;
    while (lane.waiting.length) {
      const riders = lane.waiting.splice(0);
      const replicas = await this.barrier(lane).catch(() => {
        // The marker's slot moved, or the node is gone: the next barrier reads the node map again (a newer lane
        // for the node, made meanwhile, stays).
        if (this.lanes.get(nodeId) === lane) {
          this.lanes.delete(nodeId);
          this.targets.delete(nodeId);
        }
        lane.connection.disconnect();
        return 0;
      });
      for (const ride of riders) ride(replicas);
    }
    lane.running = false;
  }

  private async barrier(lane: Lane): Promise<number> {
    const replies = await lane.connection.pipeline().set(lane.key, String(Date.now()), 'PX', MARKER_TTL_MS).wait(this.replication.replicas, this.replication.timeoutMs).exec();
    const failed = replies?.find(([err]) => err);
    if (failed || !replies) throw failed?.[0] ?? new Error('barrier without replies');
    return replies[1][1] as number;
  }

  private async laneOf(nodeId: string): Promise<Lane | undefined> {
    const known = this.lanes.get(nodeId);
    if (known) return known;
    const target = await this.targetOf(nodeId);
    if (!target || this.lanes.has(nodeId)) return this.lanes.get(nodeId);
    const lane = { connection: this.connect(target), key: target.key, waiting: [], running: false };
    this.lanes.set(nodeId, lane);
    return lane;
  }

  /** A barrier connection: the service's credentials, TLS and key prefix; no resend; WAIT may take its whole timeout. */
  private connect(target: NodeTarget): Redis {
    const where = this.redis instanceof Cluster ? { ...nodeConnection(this.config), host: target.host, port: target.port } : redisConnection(this.config);
    const connection = new Redis({
      ...where,
      keyPrefix: this.config.REDIS_KEY_PREFIX,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      commandTimeout: this.replication.timeoutMs + COMMAND_TIMEOUT_MS,
    });
    // Its failures reach the barrier as a count of 0; the shared client reports the store's health.
    connection.on('error', () => undefined);
    return connection;
  }

  private async targetOf(nodeId: string): Promise<NodeTarget | undefined> {
    if (!(this.redis instanceof Cluster)) {
      const { host = '127.0.0.1', port = 6379 } = redisConnection(this.config);
      return { host, port, key: 'replication-barrier' };
    }
    if (!this.targets.has(nodeId)) {
      this.targetsRead ??= this.readTargets(this.redis).finally(() => (this.targetsRead = undefined));
      await this.targetsRead;
    }
    return this.targets.get(nodeId);
  }

  /** Reads the cluster's masters from CLUSTER NODES: address, and a marker key in the first slot range each serves. */
  private async readTargets(cluster: Cluster): Promise<void> {
    const node = cluster.nodes('master')[0] ?? cluster.nodes('all')[0];
    if (!node) return;
    const text = (await node.cluster('NODES')) as string;
    const targets = new Map<string, NodeTarget>();
    for (const line of text.trim().split('\n')) {
      const [id, address, flags, , , , , , ...slots] = line.split(' ');
      const range = slots.find((s) => /^\d/.test(s));
      if (!flags.includes('master') || flags.includes('fail') || !range) continue;
      const [from, to = from] = range.split('-').map(Number);
      const hostPort = address.split('@')[0];
      const at = hostPort.lastIndexOf(':');
      targets.set(id, { host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)), key: markerKey(from, to) });
    }
    this.targets = targets;
  }
}

/** @returns a key whose slot lies in [from, to] (its hash tag found by trying `{replication:n}`, n = 0, 1, …) */
function markerKey(from: number, to: number): string {
  for (let n = 0; ; n++) {
    const tag = `{replication:${n}}`;
    const slot = calculateSlot(tag);
    if (slot >= from && slot <= to) return `${tag}:barrier`;
  }
}
