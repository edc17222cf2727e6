/**
 * A master of the local Redis Cluster SIGKILLed in the middle of a burst of purchases, once with
 * REDIS_WAIT_REPLICAS=1 and once without (README, What a 202 promises). Its replica is stopped (SIGSTOP), and its
 * replication link closed (a stopped process's socket still buffers the stream), for the middle third of the
 * burst, and continued as the master dies: the failover surely promotes a replica that misses that third's
 * writes. The API starts no workflow during the burst (STARTER_IN_API=false), so a 202 whose reservation the
 * failover lost leaves no trace anywhere: with WAIT none is lost, without it some are, and both counts are
 * asserted. Either way the only 5xx is 503 with Retry-After, and every order that survived ends once a starter
 * runs (its payment window is short, so it expires). The killed node is started again and rejoins as a replica.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { startApi, type RunningApi } from '../../src/api/main';
import { connectTemporal } from '../../src/workflows/client';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { buyerToken, connectClients, createTestSale, until, type Clients } from '../support/helpers';
import { http, type ApiReply } from '../support/openapi';
import { installTestRuntime } from '../support/temporalRuntime';
import { dropReplicaLinks, replicaPort } from '../support/localCluster';
import { clusterConfig, clusterNodesInfo, masterOf, nodePid, restoreCluster } from '../support/cluster';

jest.setTimeout(240_000);

const BURST = 200;
const IN_FLIGHT = 30;
const config = clusterConfig();

let clients: Clients;
let worker: RunningWorker;
let temporal: Client;
/** Processes this suite stopped: continued in afterAll whatever happened. */
const stopped = new Set<number>();

beforeAll(async () => {
  installTestRuntime();
  clients = connectClients(config);
  worker = await startWorker(config, await buildWorkflowBundle());
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  for (const pid of stopped) process.kill(pid, 'SIGCONT');
  await restoreCluster();
  await temporal?.connection.close();
  await worker?.shutdown();
  await clients?.close();
});

interface BurstResult {
  replies: ApiReply[];
  accepted: string[];
  lost: string[];
  killedPort: number;
}

/**
 * Sends BURST purchases of distinct buyers to an API on the cluster that starts no workflow; stops the replica of
 * the sale's shard 0's master and closes its link once a third of them were answered, SIGKILLs that master and continues the replica
 * at two thirds; waits for the failover, then looks for every 202's order in Redis and PostgreSQL.
 */
async function burstThroughFailover(waitReplicas: number): Promise<BurstResult> {
  // The previous burst's victim, back as a replica: three masters with a replica each.
  await restoreCluster();
  const api: RunningApi = await startApi(
    clusterConfig({ REDIS_WAIT_REPLICAS: String(waitReplicas), REDIS_WAIT_TIMEOUT_MS: '500', TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE, STARTER_IN_API: 'false' }),
  );
  try {
    const sale = await createTestSale(clients, { quantities: [BURST * 2], stockShards: [3], paymentWindowMs: 2000 });
    const itemId = sale.items[0].itemId;
    const layout = await clients.store.layouts.get(sale.saleId);
    const victim = masterOf(layout.tags[0]) as string;
    const killedPort = Number(victim.split(':')[1]);
    const replicaPid = nodePid(replicaPort(killedPort) as number);
    const run = randomUUID().slice(0, 8);
    const tokens = await Promise.all(Array.from({ length: BURST }, (_, i) => buyerToken(config, `failover-${run}-${i}`)));
    const call = http(api.url);

    const replies: ApiReply[] = new Array(BURST);
    let next = 0;
    let answered = 0;
    const lane = async () => {
      while (next < BURST) {
        const i = next++;
        replies[i] = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: tokens[i] });
        ++answered;
        if (answered === Math.floor(BURST / 3)) {
          stopped.add(replicaPid);
          process.kill(replicaPid, 'SIGSTOP');
          // A stopped replica's kernel still takes the stream into its socket buffer: the link must go.
          expect(dropReplicaLinks(killedPort)).toBe(1);
        }
        if (answered === Math.floor((2 * BURST) / 3)) {
          process.kill(nodePid(killedPort), 'SIGKILL');
          process.kill(replicaPid, 'SIGCONT');
          stopped.delete(replicaPid);
        }
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));

    // The failover: a replica of the killed node serves shard 0's slot.
    await until('a replica promoted in place of the killed master', async () => {
      const owner = masterOf(layout.tags[0], clusterNodesInfo());
      return owner !== undefined && owner !== victim;
    }, 30_000);

    const accepted = replies.filter((r) => r.status === 202).map((r) => r.body.orderId as string);
    const lost: string[] = [];
    await until('Redis answers for the sale again', async () => (await clients.store.view.stock(sale.saleId, [itemId]).then(() => true, () => false)) || undefined, 30_000);
    for (const orderId of accepted) {
      // Redis first: its reservation goes only after PostgreSQL has the order in a final state.
      const held = await clients.store.view.findReservation(sale.saleId, orderId);
      const row = held ? undefined : await clients.pool.query('SELECT 1 FROM orders WHERE id = $1', [orderId]);
      if (!held && !row?.rowCount) lost.push(orderId);
    }
    return { replies, accepted, lost, killedPort };
  } finally {
    await api.close();
  }
}

/** Starts the workflows of the orders the burst left in the start queues, with an API whose starter runs. */
async function startSurvivors(): Promise<RunningApi> {
  return startApi(clusterConfig({ TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE }));
}

/** Waits until each order has a final row in PostgreSQL (the window is 2 s, so each EXPIRES unless rejected). */
async function allEnd(orderIds: string[]): Promise<void> {
  await until(
    `${orderIds.length} orders in a final state`,
    async () => {
      const { rows } = await clients.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM orders WHERE id = ANY($1::uuid[]) AND status <> 'PENDING'`, [orderIds]);
      return rows[0].n === orderIds.length || undefined;
    },
    120_000,
  );
}

function checkReplies(replies: ApiReply[]): void {
  const statuses = new Set(replies.map((r) => r.status));
  expect([...statuses].filter((s) => s !== 202 && s !== 503)).toEqual([]);
  for (const r of replies.filter((x) => x.status === 503)) expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
}

test('with REDIS_WAIT_REPLICAS=1, every 202 answered survives a master SIGKILLed mid-burst after its replica stalled, and every order ends', async () => {
  const result = await burstThroughFailover(1);
  process.stderr.write(`failover with WAIT 1: ${result.accepted.length} × 202 of ${BURST}, ${result.lost.length} lost, ${result.replies.filter((r) => r.status === 503).length} × 503 (master :${result.killedPort} killed)\n`);
  checkReplies(result.replies);
  expect(result.accepted.length).toBeGreaterThan(0);
  expect(result.lost).toEqual([]);
  // The killed node back as a replica: until then its shard's master has none, so WAIT holds the starts of that
  // shard's orders (their workflows would otherwise run for reservations not yet on any replica).
  await restoreCluster();
  const starter = await startSurvivors();
  await allEnd(result.accepted);
  await starter.close();
});

test('without WAIT, the same failover loses 202s (they were on the stalled master only), the only 5xx is 503, every surviving order ends', async () => {
  const result = await burstThroughFailover(0);
  process.stderr.write(`failover without WAIT: ${result.accepted.length} × 202 of ${BURST}, ${result.lost.length} lost, ${result.replies.filter((r) => r.status === 503).length} × 503 (master :${result.killedPort} killed)\n`);
  checkReplies(result.replies);
  expect(result.accepted.length).toBeGreaterThan(0);
  expect(result.lost.length).toBeGreaterThan(0);
  const starter = await startSurvivors();
  await allEnd(result.accepted.filter((id) => !result.lost.includes(id)));
  await starter.close();
});
