/**
 * The local Redis Cluster of `scripts/services.sh up --cluster` (scripts/cluster-stack.sh), as the cluster
 * suites and the shards benchmark see it: its seed list, its nodes and which master serves a slot, and the
 * pid of a node.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import calculateSlot from 'cluster-key-slot';

const ROOT = join(__dirname, '..', '..');
const CLUSTER_ENV = join(ROOT, '.local', 'cluster', 'cluster.env');

/** @returns the seed list services.sh wrote; @throws when the cluster was never started (npm test starts it) */
export function clusterNodes(): string {
  if (!existsSync(CLUSTER_ENV)) throw new Error(`${CLUSTER_ENV} is missing: run bash scripts/services.sh up --cluster`);
  const line = readFileSync(CLUSTER_ENV, 'utf8').match(/^REDIS_CLUSTER_NODES=(.+)$/m);
  if (!line) throw new Error(`${CLUSTER_ENV} names no REDIS_CLUSTER_NODES`);
  return line[1].trim();
}

/** One node as `CLUSTER NODES` lists it. */
export interface ClusterNode {
  id: string;
  address: string;
  port: number;
  master: boolean;
  failed: boolean;
  /** The id of the master it replicates ('-' for a master). */
  masterId: string;
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
      const [id, addr, flags, masterId, , , , , ...ranges] = line.split(' ');
      const address = addr.split('@')[0];
      return {
        id,
        address,
        masterId,
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

const cli = promisify(execFile);

/**
 * Closes the replication links of the master at masterPort (CLIENT KILL TYPE replica): what it writes next reaches
 * no replica until one connects again (at once, unless it is stopped).
 * @returns how many links were closed
 */
export function dropReplicaLinks(masterPort: number): number {
  return Number(execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', String(masterPort), 'CLIENT', 'KILL', 'TYPE', 'replica'], { encoding: 'utf8' }).trim());
}

/** @returns the port of a live replica of the master at masterPort, undefined when it has none */
export function replicaPort(masterPort: number, nodes = clusterNodesInfo()): number | undefined {
  const master = nodes.find((n) => n.port === masterPort);
  return nodes.find((n) => master && n.masterId === master.id && !n.failed)?.port;
}

/**
 * Moves one slot, keys and all, from the master serving it to the master at toPort, as `redis-cli --cluster
 * reshard` does for its slots (which it picks itself): IMPORTING and MIGRATING, MIGRATE in batches (clients
 * asking for a moved key meanwhile get ASK), then the slot assigned to its new master on every master.
 * @param whileMigrating run once every key moved and before the slot is assigned: every command on the slot's
 *   keys is then redirected with ASK from the old master to the new one
 * @returns how many keys moved
 * @throws when the slot has no live master or toPort serves it already
 */
export async function migrateSlot(slot: number, toPort: number, whileMigrating?: () => Promise<void>): Promise<number> {
  const nodes = clusterNodesInfo();
  const from = nodes.find((n) => n.master && !n.failed && n.slots.some(([a, b]) => slot >= a && slot <= b));
  const to = nodes.find((n) => n.port === toPort);
  if (!from || !to || from.port === toPort) throw new Error(`cannot move slot ${slot} to :${toPort} (served by ${from?.address ?? 'nobody'})`);
  const run = async (port: number, ...args: string[]) => (await cli('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { encoding: 'utf8' })).stdout.trim();
  await run(to.port, 'cluster', 'setslot', String(slot), 'importing', from.id);
  await run(from.port, 'cluster', 'setslot', String(slot), 'migrating', to.id);
  let moved = 0;
  for (;;) {
    const keys = (await run(from.port, 'cluster', 'getkeysinslot', String(slot), '10')).split('\n').filter(Boolean);
    if (!keys.length) break;
    await run(from.port, 'migrate', '127.0.0.1', String(to.port), '', '0', '5000', 'keys', ...keys);
    moved += keys.length;
  }
  await whileMigrating?.();
  for (const node of [to, from, ...nodes.filter((n) => n.master && !n.failed && n !== to && n !== from)]) {
    await run(node.port, 'cluster', 'setslot', String(slot), 'node', to.id);
  }
  return moved;
}
