/**
 * The local Redis Cluster for the cluster suites (test/support/localCluster.ts): a test configuration on it (key
 * prefix `test:`, so the suites never touch what a user keeps there; a cluster has database 0 only), and the
 * cluster put back together after a fault suite killed a node.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Config } from '../../src/config';
import { clusterNodes } from './localCluster';
import { testConfig } from './helpers';

export { clusterNodes, clusterNodesInfo, masterOf, nodePid } from './localCluster';

const ROOT = join(__dirname, '..', '..');

/** testConfig on the local cluster, the suites' key prefix, and the given overrides. */
export function clusterConfig(overrides: Record<string, string> = {}): Config {
  return testConfig({ REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0', REDIS_KEY_PREFIX: 'test:', ...overrides });
}

/**
 * Starts whatever node of the stack is down (a killed master comes back as its successor's replica) and waits
 * until the cluster is whole, every replica in sync (services.sh up). Asynchronous: the suite's API and worker
 * go on meanwhile.
 */
export async function restoreCluster(): Promise<void> {
  // Without the suites' environment: services.sh would otherwise take their database and topic for the stack's.
  await promisify(execFile)('bash', [join(ROOT, 'scripts', 'services.sh'), 'up'], { timeout: 300_000, env: { PATH: process.env.PATH, HOME: process.env.HOME, CI: process.env.CI } });
}
