/**
 * Benchmark of one hot item's reservations across Redis layouts (`npm run bench -- shards`): the same N buyers
 * reserve one unit each through ReservationStore (the API's own path to Redis: scripts, auto-pipelining on one
 * node and not on a cluster, src/reservation/client.ts autoPipelines), at the same concurrency from this process, on
 *   1. the single Redis node (the baseline), and again without auto-pipelining,
 *   2. the local Redis Cluster with the item in 1 stock shard,
 *   3. the cluster with the item in 3 stock shards, one per master, and again with auto-pipelining,
 * all in one run. For each it prints reservations/s and its ratio to the baseline, each master's share of the
 * script calls (INFO commandstats, evalsha + eval), the CPU µs each Redis node and this process spent per
 * reservation (/proc), and what that CPU predicts with one core per node: the node that spends the most per
 * reservation saturates first, at 1e6 / its µs per reservation. On this machine's two cores the client (this
 * process) and the nodes share the CPU, so the measured rate is the client's and the prediction is the figure
 * that says what the layout is worth. Appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_SHARDS_ORDERS (20000 per layout), BENCH_SHARDS_CONCURRENCY (200).
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { SaleLayouts, shardKeys } from '../../src/reservation/layout';
import { ReservationStore } from '../../src/reservation/store';
import { autoPipelines, createRedis } from '../../src/reservation/client';
import { createSale, loadSale } from '../../src/sale/sales';
import { appendResult } from '../shared/benchResults';
import { clusterNodes, clusterNodesInfo, nodePid } from '../../test/support/localCluster';
import { stackPid, treesCpuMs } from '../shared/procCpu';
import { shardPlacer } from '../../src/reservation/placement';

const ORDERS = Number(process.env.BENCH_SHARDS_ORDERS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_SHARDS_CONCURRENCY ?? 200);

interface Node {
  name: string;
  port: number;
  pid: number;
}

export interface ShardsFigures {
  layout: string;
  shards: number;
  orders: number;
  reservationsPerS: number;
  /** reservationsPerS / the single node's. */
  ratio: number;
  /** Per master (host:port), its share of the script calls. */
  commandShare: Record<string, number>;
  /** CPU µs per reservation: each Redis node that served scripts, and the client (this process). */
  cpuUsPerReservation: Record<string, number>;
  /** 1e6 / the busiest node's µs per reservation: reservations/s with one core per node. */
  predictedPerS: number;
}

function scriptCalls(port: number): number {
  const text = execFileSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'info', 'commandstats'], { encoding: 'utf8' });
  let calls = 0;
  for (const m of text.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(m[2]);
  return calls;
}

/** @param pipelining whether the client auto-pipelines: the API's choice (autoPipelines) unless a row compares the other */
async function measure(config: Config, layout: string, shards: number, nodes: Node[], baselinePerS?: number, pipelining = autoPipelines(config)): Promise<ShardsFigures> {
  const pool = createPool(config);
  const redis = createRedis(config, { enableAutoPipelining: pipelining });
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  try {
    const now = Date.now();
    const sale = await createSale(
      pool,
      {
        name: `bench-shards-${layout}-${randomUUID()}`,
        startsAt: new Date(now - 1000).toISOString(),
        endsAt: new Date(now + 3_600_000).toISOString(),
        paymentWindowMs: 600_000,
        items: [{ productId: 'hot', quantity: ORDERS, priceMinor: 100, currency: 'EUR', stockShards: shards }],
      },
      shardPlacer(store.redis),
    );
    await loadSale(pool, store, sale.saleId, false);
    const itemId = sale.items[0].itemId;
    const run = randomUUID().slice(0, 8);
    const order = (i: number) => ({ orderId: randomUUID(), saleId: sale.saleId, itemId, userId: `bench-${run}-${i}`, priceMinor: 100, paymentWindowMs: 600_000, reservedAtMs: Date.now() });

    const callsBefore = nodes.map((n) => scriptCalls(n.port));
    const roots = Object.fromEntries(nodes.map((n) => [n.name, n.pid]));
    const cpuBefore = treesCpuMs(roots);
    const ownBefore = process.cpuUsage();
    const t0 = performance.now();
    let next = 0;
    let reserved = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < ORDERS) {
          const outcome = await store.reserve(order(next++));
          if (outcome.kind === 'RESERVED') reserved += 1;
        }
      }),
    );
    const ms = performance.now() - t0;
    const own = process.cpuUsage(ownBefore);
    const cpuAfter = treesCpuMs(roots);
    const calls = nodes.map((n, i) => scriptCalls(n.port) - callsBefore[i]);
    const totalCalls = calls.reduce((a, b) => a + b, 0);

    const cpuUsPerReservation: Record<string, number> = {};
    for (const n of nodes) {
      const us = ((cpuAfter[n.name] - cpuBefore[n.name]) * 1000) / reserved;
      if (calls[nodes.indexOf(n)] > 0) cpuUsPerReservation[n.name] = Math.round(us * 10) / 10;
    }
    cpuUsPerReservation.client = Math.round(((own.user + own.system) / reserved) * 10) / 10;
    const busiest = Math.max(...nodes.filter((_, i) => calls[i] > 0).map((n) => cpuUsPerReservation[n.name]));
    const reservationsPerS = Math.round((reserved / ms) * 1000);

    const layoutOf = await store.layouts.get(sale.saleId);
    // The sale's keys go, its loaded mark with them (a shard's data is its loaded mark's, not its stock key's,
    // which is gone anyway once every unit is taken): no starter starts its orders, nothing of it stays loaded.
    for (const tag of layoutOf.tags) {
      const keys = shardKeys(tag);
      await redis.del(keys.startQueue);
      await redis.del(keys.buyers);
      await redis.del(keys.reservations);
      await redis.del(keys.claims);
      await redis.del(keys.stock(itemId));
      await redis.del(keys.returns(itemId));
      await redis.del(keys.released);
      await redis.del(keys.loaded);
    }
    return {
      layout,
      shards,
      orders: reserved,
      reservationsPerS,
      ratio: baselinePerS ? Math.round((reservationsPerS / baselinePerS) * 100) / 100 : 1,
      commandShare: Object.fromEntries(nodes.map((n, i) => [n.name, totalCalls ? Math.round((calls[i] / totalCalls) * 1000) / 1000 : 0]).filter(([, share]) => (share as number) > 0)),
      cpuUsPerReservation,
      predictedPerS: Math.round(1e6 / busiest),
    };
  } finally {
    await Promise.allSettled([pool.end(), redis.quit()]);
  }
}

async function main(): Promise<void> {
  const single = loadConfig({ ...process.env, LOG_LEVEL: 'silent' });
  const cluster = loadConfig({ ...process.env, LOG_LEVEL: 'silent', REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0' });
  const singleNode: Node[] = [{ name: `127.0.0.1:${single.REDIS_PORT}`, port: single.REDIS_PORT, pid: stackPid('redis/redis.pid') }];
  const masters: Node[] = clusterNodesInfo()
    .filter((n) => n.master && !n.failed)
    .map((n) => ({ name: n.address, port: n.port, pid: nodePid(n.port) }));

  console.log(`shards bench: ${ORDERS} reservations of one item per layout, ${CONCURRENCY} in flight, from one client process`);
  // Not reported: the first layout measured would also pay for this process' warm-up (JIT, connections).
  await measure(single, 'warm-up', 1, singleNode);
  const base = await measure(single, 'single node', 1, singleNode);
  const results = [
    base,
    // The choice of autoPipelines, measured: each layout with the other setting, in the same run.
    await measure(single, 'single node, no auto-pipelining', 1, singleNode, base.reservationsPerS, false),
    await measure(cluster, 'cluster, 1 shard', 1, masters, base.reservationsPerS),
    await measure(cluster, 'cluster, 3 shards', 3, masters, base.reservationsPerS),
    await measure(cluster, 'cluster, 3 shards, auto-pipelining', 3, masters, base.reservationsPerS, true),
  ];
  for (const r of results) {
    const shares = Object.entries(r.commandShare)
      .map(([node, share]) => `${node} ${(share * 100).toFixed(1)}%`)
      .join(', ');
    const cpu = Object.entries(r.cpuUsPerReservation)
      .map(([node, us]) => `${node} ${us}`)
      .join(', ');
    console.log(`  ${r.layout.padEnd(36)} ${String(r.reservationsPerS).padStart(6)} reservations/s  ×${r.ratio.toFixed(2)} of the single node`);
    console.log(`    script calls per master: ${shares}`);
    console.log(`    CPU µs per reservation: ${cpu}`);
    console.log(`    one core per node would take ${r.predictedPerS} reservations/s (×${(r.predictedPerS / base.predictedPerS).toFixed(2)} of the single node's prediction)`);
  }
  appendResult('shards', { orders: ORDERS, concurrency: CONCURRENCY, results });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
