/**
 * `API_PROCESSES=2 node dist/api/main.js` on the local Redis Cluster: two API processes behind one port, each
 * with its starter, sell a 3-shard item exactly; a process SIGKILLed is replaced and the sale goes on; SIGTERM
 * to the primary drains both and exits 0.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { shardKeys } from '../../src/reservation/layout';
import { connectTemporal } from '../../src/workflows/client';
import { startChild, type Child } from '../support/processes';
import { bounded, buyerToken, connectClients, createTestSale, freePort, NO_RATE_LIMITS, until, type Clients } from '../support/helpers';
import { http, type ApiReply } from '../support/openapi';
import { clusterConfig, clusterNodes } from '../support/cluster';

// Its waits are bounded (up to a minute for both starters to join): a stalled stage fails with its own message,
// not the suite's time limit.
jest.setTimeout(180_000);

const config = clusterConfig();
const accepted: string[] = [];
let clients: Clients;
let temporal: Client;
let api: Child | undefined;

beforeAll(async () => {
  clients = connectClients(config);
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  await api?.stop();
  await Promise.allSettled(accepted.map((id) => temporal.workflow.getHandle(id).terminate('processes suite finished')));
  await temporal?.connection.close();
  await clients?.close();
});

/** @returns the pids of the primary's children (the API processes) */
function children(pid: number): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).trim().split('\n').map(Number);
  } catch {
    return [];
  }
}

test('two API processes share the port, each with a starter, sell a 3-shard item exactly, survive a SIGKILLed process, drain on SIGTERM', async () => {
  const port = await freePort();
  const env = {
    ...process.env,
    LOG_LEVEL: 'info',
    API_PORT: String(port),
    INTERNAL_API_PORT: '0',
    API_PROCESSES: '2',
    REDIS_CLUSTER_NODES: clusterNodes(),
    REDIS_DB: '0',
    REDIS_KEY_PREFIX: 'test:',
    SALE_GATE_REQUIRED: 'false',
    ...NO_RATE_LIMITS,
    TEMPORAL_TASK_QUEUE: `processes-${randomUUID()}`,
  };
  api = startChild('api', 'dist/api/main.js', env, join(__dirname, '..', '..', 'reports', 'test', 'processes-api.log'), 'api listening');
  await api.ready;
  const primary = api.process.pid as number;
  const pids = await until('two API processes', async () => children(primary).length === 2 && children(primary), 30_000);

  const sale = await createTestSale(clients, { quantities: [150], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const call = http(`http://127.0.0.1:${port}`);
  const buy = async (buyer: string) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(config, buyer) });
  const count = (replies: ApiReply[], status: number) => replies.filter((r) => r.status === status).length;

  const first = await bounded(50, Array.from({ length: 100 }, (_, i) => () => buy(`proc-a-${i}-${randomUUID()}`)));
  expect(count(first, 202)).toBe(100);
  accepted.push(...first.filter((r) => r.status === 202).map((r) => r.body.orderId as string));

  // Both processes' starters read the sale's queues, each as a consumer of its own (on whichever shards it polled).
  const layout = await clients.store.layouts.get(sale.saleId);
  let owners = new Set<number>();
  await until(
    'both starters in the start queue groups',
    async () => {
      for (const tag of layout.tags) {
        // Until a starter has read a stream, it has no group (NOGROUP).
        const consumers = (await clients.redis.xinfo('CONSUMERS', `test:${shardKeys(tag).startQueue}`, 'starters').catch(() => [])) as string[][];
        owners = new Set([...owners, ...consumers.map((c) => Number(String(c[c.indexOf('name') + 1]).split('-').at(-2)))]);
      }
      return pids.every((pid) => owners.has(pid)) || undefined;
    },
    60_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}: API processes ${pids.join(', ')}, consumers seen ${[...owners].join(', ') || 'none'}`);
  });

  process.kill(pids[0], 'SIGKILL');
  await until('a replacement process', async () => (children(primary).length === 2 && !children(primary).includes(pids[0])) || undefined, 30_000);
  const second = await bounded(50, Array.from({ length: 100 }, (_, i) => () => buy(`proc-b-${i}-${randomUUID()}`)));
  accepted.push(...second.filter((r) => r.status === 202).map((r) => r.body.orderId as string));
  // Exactly the stock, whichever process answered.
  expect([count(second, 202), count(second, 410)]).toEqual([50, 50]);
  expect(await clients.store.view.stock(sale.saleId, [itemId])).toEqual(new Map([[itemId, 0]]));
  expect((await clients.store.view.buyers(sale.saleId)).size).toBe(150);
  // Each order holds its own unit of the 150 (I1).
  expect(new Set((await clients.store.view.reservations(sale.saleId)).map((r) => r.unit)).size).toBe(150);

  const exited = new Promise<number | null>((resolve) => api?.process.once('exit', (code) => resolve(code)));
  api.process.kill('SIGTERM');
  expect(await exited).toBe(0);
  expect(children(primary)).toEqual([]);
});
