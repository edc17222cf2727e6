/**
 * The local Redis Cluster of `scripts/services.sh up --cluster` (scripts/cluster-stack.sh), for the cluster
 * suites: its seed list, a test configuration on it (key prefix `test:`, so the suites never touch what a user
 * keeps there; a cluster has database 0 only), and the masters behind a sale's shards.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import calculateSlot from 'cluster-key-slot';
import type { Config } from '../../src/config';
import { testConfig } from '../helpers';

const ROOT = join(__dirname, '..', '..');
const CLUSTER_ENV = join(ROOT, '.local', 'cluster', 'cluster.env');

/** @returns the seed list services.sh wrote; @throws when the cluster was never started (npm test starts it) */
export function clusterNodes(): string {
  if (!existsSync(CLUSTER_ENV)) throw new Error(`${CLUSTER_ENV} is missing: run bash scripts/services.sh up --cluster`);
  const line = readFileSync(CLUSTER_ENV, 'utf8').match(/^REDIS_CLUSTER_NODES=(.+)$/m);
  if (!line) throw new Error(`${CLUSTER_ENV} names no REDIS_CLUSTER_NODES`);
  return line[1].trim();
}

/** testConfig on the local cluster, the suites' key prefix, and the given overrides. */
export function clusterConfig(overrides: Record<string, string> = {}): Config {
  return testConfig({ REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0', REDIS_KEY_PREFIX: 'test:', ...overrides });
}

/** One node as `CLUSTER NODES` lists it. */
export interface ClusterNode {
  id: string;
  address: string;
  port: number;
  master: boolean;
  failed: boolean;
  /** Slot ranges [from, to] it serves (masters). */
  slots: [number, number][];
}

/**
 * @returns the cluster's nodes, as the node at `port` sees them (default: the first seed that answers)
 * @throws when no node asked answers
 */
export function clusterNodesInfo(port?: number): ClusterNode[] {
  const ports = port ? [port] : clusterNodes().split(',').map((node) => Number(node.split(':')[1]));
  let text: string | undefined;
  for (const p of ports) {
    try {
      text = execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', String(p), 'cluster', 'nodes'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      break;
    } catch {
      // That node is down (a fault suite killed it): ask the next.
    }
  }
  if (text === undefined) throw new Error(`no cluster node answered on ports ${ports.join(', ')}`);
  return text
    .trim()
    .split('\n')
    .map((line) => {
      const [id, addr, flags, , , , , , ...ranges] = line.split(' ');
      const address = addr.split('@')[0];
      return {
        id,
        address,
        port: Number(address.split(':')[1]),
        master: flags.includes('master'),
        failed: flags.includes('fail'),
        slots: ranges
          .filter((r) => /^\d/.test(r))
          .map((r) => {
            const [from, to] = r.split('-').map(Number);
            return [from, to ?? from] as [number, number];
          }),
      };
    });
}

/** @returns the address of the master serving the slot of a key or hash tag */
export function masterOf(keyOrTag: string, nodes = clusterNodesInfo()): string | undefined {
  const slot = calculateSlot(keyOrTag);
  return nodes.find((n) => n.master && !n.failed && n.slots.some(([from, to]) => slot >= from && slot <= to))?.address;
}

/** @returns the pid of the cluster node listening on port (its pid file under .local/cluster) */
export function nodePid(port: number): number {
  return Number(readFileSync(join(ROOT, '.local', 'cluster', String(port), 'redis.pid'), 'utf8').trim());
}

/** Starts whatever node of the stack is down (a killed master comes back as its successor's replica) and waits for the cluster. */
export function restoreCluster(): void {
  // Without the suites' environment: services.sh would otherwise take their database and topic for the stack's.
  execFileSync('bash', [join(ROOT, 'scripts', 'services.sh'), 'up'], { stdio: 'ignore', timeout: 300_000, env: { PATH: process.env.PATH, HOME: process.env.HOME, CI: process.env.CI } });
}
