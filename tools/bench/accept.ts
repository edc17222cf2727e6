/**
 * Benchmark of the accepting path (`npx tsx tools/bench/accept.ts`): N distinct buyers, one press each, over real
 * HTTP to the API (its own process, its starter running, a worker process behind it), side by side in the same
 * run with the Redis reservation alone (reserve.lua through ReservationStore from this process, same
 * concurrency) as the baseline, once with Redis' `appendfsync always` (the stack's default, a durable 202)
 * and once with `everysec`, switched with CONFIG SET and put back afterwards. Beside them, driven by the same
 * crowd, the ceiling: a bare Koa server that answers every purchase 202 and does nothing else (bareAccept.ts),
 * the most any Koa accepting path could reach here with that crowd on the same cores. For each mode it prints
 * accepted 202s per second against reservations per second (the ratio), the ceiling's rate as the same ratio
 * and ours as a share of it (and the bare server's CPU per 202), latency, the time to the last 202, and the
 * start queue's drain: the time until the last order's workflow was started (Temporal's pace), and where the
 * HTTP run's CPU went: µs per accepted purchase for the crowd (this process), the API, Redis, Temporal, the
 * worker and PostgreSQL, read from /proc.
 * Orders use a 1 s payment window; each mode waits for the worker to end its orders before the next one is
 * measured. N presses on a sale not yet open (403, nothing written) warm the API first, and as many the bare
 * server. Appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_ACCEPT_ORDERS (3000 per mode), BENCH_ACCEPT_CONCURRENCY (100), BENCH_ACCEPT_CLUSTER
 * (1: the API and the baseline on the local Redis Cluster, appendfsync switched on every master).
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSigner } from 'fast-jwt';
import { Cluster } from 'ioredis';
import { loadConfig, type Config } from '../../src/config';
import type { Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { newOrderId } from '../../src/order/orderId';
import { createPool } from '../../src/infra/db';
import { CROWD_IP_LIMIT, pressAll, saleGateOf } from '../../test/support/crowd';
import { freePort, startChild, type Child } from '../../test/support/processes';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import { saleKeys } from '../../src/reservation/layout';
import { SaleLayouts } from '../../src/reservation/layout';
import { createSale, loadSale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { appendResult } from '../shared/benchResults';
import { MACHINE_PARTS, machineCpu, treesCpuMs, type MachineCpu } from '../shared/procCpu';
import { shardPlacer } from '../../src/reservation/placement';
import { clusterNodes } from '../../test/support/localCluster';

const ORDERS = Number(process.env.BENCH_ACCEPT_ORDERS ?? 3000);
const CONCURRENCY = Number(process.env.BENCH_ACCEPT_CONCURRENCY ?? 100);
const MODES = ['always', 'everysec'] as const;
const ON_CLUSTER = process.env.BENCH_ACCEPT_CLUSTER === '1';

export interface AcceptFigures {
  appendfsync: (typeof MODES)[number];
  orders: number;
  redisReservePerS: number;
  acceptedPerS: number;
  ratio: number;
  p50Ms: number;
  p99Ms: number;
  msToLast202: number;
  /** 202s per second of the bare Koa server (bareAccept.ts) to the same crowd: what any Koa accepting path could reach here. */
  ceilingPerS: number;
  /** ceilingPerS / redisReservePerS: the ratio's ceiling on this machine. */
  ceiling: number;
  /** acceptedPerS / ceilingPerS. */
  ofCeiling: number;
  /** CPU µs the bare server spent per 202 (cpuUsPer202.api is the same figure for the API). */
  ceilingServerCpuUsPer202: number;
  /** From the first press until the start queue was empty (the last workflow started), ±50 ms. */
  msToLastStarted: number;
  startsPerS: number;
  /** CPU µs per accepted purchase during the HTTP run, per part of the machine (from /proc; crowd = this process). */
  cpuUsPer202: MachineCpu;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await work();
  return { ms: performance.now() - t0, value };
}

/** The bench's processes and clients: the API with its starter, a niced worker, the bare Koa server. */
interface Rig {
  config: Config;
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  temporal: Client;
  children: Child[];
  baseUrl: string;
  bareUrl: string;
  sign: (payload: Record<string, unknown>) => string;
  cpuNow: () => MachineCpu;
  /** Switches appendfsync on every node (CONFIG is a node's own: on a cluster each master is switched). */
  setAppendfsync(mode: string): Promise<unknown>;
  /** appendfsync as it was before the bench. */
  original: string;
}

async function openRig(): Promise<Rig> {
  const taskQueue = `bench-accept-${randomUUID()}`;
  // Gate and rate limits on, as deployed; the crowd's one client IP (loopback) has its limit lifted, not removed.
  const env = { ...process.env, ...(ON_CLUSTER ? { REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0' } : {}), LOG_LEVEL: 'info', API_PORT: String(await freePort()), INTERNAL_API_PORT: '0', TEMPORAL_TASK_QUEUE: taskQueue, SALE_GATE_REQUIRED: 'true', RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT) };
  const barePort = await freePort();
  const config = loadConfig(env);
  const pool = createPool(config);
  const redis = createRedis(config);
  const logs = mkdtempSync(join(tmpdir(), 'bench-accept-'));
  const children = [
    startChild('api', 'dist/api/main.js', env, join(logs, 'api.log'), 'api listening'),
    // As in the demo, the drain's worker yields the CPU to the accepting path on a shared machine.
    startChild('worker', 'dist/worker/main.js', env, join(logs, 'worker.log'), 'worker running', { nice: 10 }),
    startChild('bare accept', 'tools/bench/bareAccept.ts', { ...env, API_PORT: String(barePort) }, join(logs, 'bare.log'), 'bare accept listening'),
  ];
  await Promise.all(children.map((c) => c.ready));
  // A cluster client knows its masters once it has read the slot map.
  if (redis instanceof Cluster && redis.status !== 'ready') await once(redis, 'ready');
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const [, original] = (await nodes[0].config('GET', 'appendfsync')) as [string, string];
  return {
    config,
    pool,
    redis,
    store: new ReservationStore(redis, new SaleLayouts(pool)),
    temporal: await connectTemporal(config),
    children,
    baseUrl: `http://${config.API_HOST}:${config.API_PORT}`,
    bareUrl: `http://${config.API_HOST}:${barePort}`,
    sign: createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 }),
    cpuNow: machineCpu({ api: children[0].process.pid as number, worker: children[1].process.pid as number }, env),
    setAppendfsync: (mode) => Promise.all(nodes.map((node) => node.config('SET', 'appendfsync', mode))),
    original,
  };
}

/** A sale of ORDERS units open now, with 1 s payment windows, loaded. */
async function newSale(rig: Rig): Promise<{ saleId: number; itemId: number }> {
  const now = Date.now();
  const sale = await createSale(rig.pool, {
    name: `bench-accept-${randomUUID()}`,
    startsAt: new Date(now - 1000).toISOString(),
    endsAt: new Date(now + 3_600_000).toISOString(),
    paymentWindowMs: 1000,
    items: [{ productId: 'bench', quantity: ORDERS, priceMinor: 100, currency: 'EUR' }],
  }, shardPlacer(rig.store.redis));
  await loadSale(rig.pool, rig.store, sale.saleId, false);
  return { saleId: sale.saleId, itemId: sale.items[0].itemId };
}

/**
 * Presses on a sale that has not started, each refused 403 (nothing written), so that both measured runs meet a
 * warm API (JIT, connections, token checks) and no earlier orders' workflows run meanwhile; as many on the bare server.
 */
async function warmUp(rig: Rig): Promise<void> {
  const later = await createSale(rig.pool, {
    name: `bench-accept-warmup-${randomUUID()}`,
    startsAt: new Date(Date.now() + 3_600_000).toISOString(),
    endsAt: new Date(Date.now() + 7_200_000).toISOString(),
    paymentWindowMs: 1000,
    items: [{ productId: 'warmup', quantity: 1, priceMinor: 100, currency: 'EUR' }],
  }, shardPlacer(rig.store.redis));
  const warmup = Array.from({ length: ORDERS }, (_, i) => ({ buyer: `w${i}`, itemId: later.items[0].itemId, token: rig.sign({ sub: `warmup-${i}-${randomUUID()}` }) }));
  for (const url of [rig.baseUrl, rig.bareUrl]) await pressAll({ baseUrl: url, presses: warmup, concurrency: CONCURRENCY, rate: 0, deadlineMs: Date.now() + 600_000 });
}

/** The baseline: ORDERS reservations through ReservationStore from this process, CONCURRENCY in flight. @returns per second */
async function reservationsPerS(rig: Rig): Promise<number> {
  const base = await newSale(rig);
  let next = 0;
  const run = await timed(() =>
    Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < ORDERS) {
          const i = next++;
          await rig.store.reserve({ orderId: newOrderId(base.saleId), saleId: base.saleId, itemId: base.itemId, userId: `b${i}`, priceMinor: 100, paymentWindowMs: 1000, reservedAtMs: Date.now() });
        }
      }),
    ),
  );
  // Those were reservations only: no starter is to start workflows for them.
  await rig.redis.del(saleKeys(base.saleId).startQueue);
  return ORDERS / (run.ms / 1000);
}

/** The ceiling: the bare Koa server's 202s to the same crowd. @returns per second, and its CPU µs per 202 */
async function ceiling(rig: Rig, mode: string, itemId: number): Promise<{ perS: number; cpuUsPer202: number }> {
  const presses = Array.from({ length: ORDERS }, (_, i) => ({ buyer: `c${i}`, itemId, token: rig.sign({ sub: `ceiling-${mode}-${i}-${randomUUID()}` }) }));
  // An untimed round first: after the previous mode's drain (minutes of idle polling here) the crowd's first
  // round measured about twice its CPU per press, and the ceiling half its rate.
  const press = () => pressAll({ baseUrl: rig.bareUrl, presses, concurrency: CONCURRENCY, rate: 0, deadlineMs: Date.now() + 600_000 });
  await press();
  const cpu = () => treesCpuMs({ bare: rig.children[2].process.pid as number }).bare;
  const before = cpu();
  const run = await timed(press);
  if (run.value.filter((r) => r.status === 202).length !== ORDERS) throw new Error('the bare server did not answer every press 202');
  return { perS: ORDERS / (run.ms / 1000), cpuUsPer202: Math.round(((cpu() - before) * 1000) / ORDERS) };
}

/** One appendfsync mode: the baseline, the ceiling, then ORDERS buyers over HTTP and the start queue's drain. */
async function measureMode(rig: Rig, mode: (typeof MODES)[number]): Promise<AcceptFigures> {
  await rig.setAppendfsync(mode);
  const redisPerS = await reservationsPerS(rig);
  const ours = await newSale(rig);
  const bare = await ceiling(rig, mode, ours.itemId);
  const presses = Array.from({ length: ORDERS }, (_, i) => ({ buyer: `b${i}`, itemId: ours.itemId, token: rig.sign({ sub: `${mode}-${i}-${randomUUID()}` }) }));
  const queue = saleKeys(ours.saleId).startQueue;
  const firstPress = Date.now();
  let pressing = true;
  const drained = (async () => {
    while (pressing || (await rig.redis.xlen(queue)) > 0) await sleep(50);
    return Date.now() - firstPress;
  })();
  const gate = await saleGateOf(rig.baseUrl, ours.saleId, Date.now() + 10_000);
  const cpuBefore = rig.cpuNow();
  const httpRun = await timed(() => pressAll({ baseUrl: rig.baseUrl, presses, gate, concurrency: CONCURRENCY, rate: 0, deadlineMs: Date.now() + 600_000 }));
  pressing = false;
  const cpuAfter = rig.cpuNow();
  const accepted = httpRun.value.filter((r) => r.status === 202);
  if (accepted.length !== ORDERS) throw new Error(`expected ${ORDERS} × 202, got ${accepted.length}`);
  const latencies = accepted.map((r) => r.latencyMs).sort((a, b) => a - b);
  const msToLastStarted = await drained;
  const acceptedPerS = ORDERS / (httpRun.ms / 1000);
  // Every order expires after its 1 s window: the next mode starts once the worker has ended them all.
  while ((await rig.temporal.workflow.count(`SaleId = ${ours.saleId} AND ExecutionStatus = "Running"`)).count > 0) await sleep(1000);
  return {
    appendfsync: mode,
    orders: ORDERS,
    redisReservePerS: Math.round(redisPerS),
    acceptedPerS: Math.round(acceptedPerS),
    ratio: Math.round((acceptedPerS / redisPerS) * 1000) / 1000,
    ceilingPerS: Math.round(bare.perS),
    ceiling: Math.round((bare.perS / redisPerS) * 1000) / 1000,
    ofCeiling: Math.round((acceptedPerS / bare.perS) * 1000) / 1000,
    ceilingServerCpuUsPer202: bare.cpuUsPer202,
    p50Ms: Math.round(latencies[Math.floor(latencies.length / 2)] * 10) / 10,
    p99Ms: Math.round(latencies[Math.floor(latencies.length * 0.99)] * 10) / 10,
    msToLast202: Math.max(...accepted.map((r) => r.answeredAtMs)) - firstPress,
    msToLastStarted,
    startsPerS: Math.round(ORDERS / (msToLastStarted / 1000)),
    cpuUsPer202: Object.fromEntries(MACHINE_PARTS.map((k) => [k, Math.round(((cpuAfter[k] - cpuBefore[k]) * 1000) / ORDERS)])) as MachineCpu,
  };
}

export async function benchAccept(): Promise<AcceptFigures[]> {
  const rig = await openRig();
  try {
    await warmUp(rig);
    const figures: AcceptFigures[] = [];
    for (const mode of MODES) figures.push(await measureMode(rig, mode));
    return figures;
  } finally {
    await rig.setAppendfsync(rig.original).catch(() => undefined);
    await Promise.allSettled(rig.children.map((c) => c.stop()));
    await Promise.allSettled([rig.pool.end(), rig.redis.quit(), rig.temporal.connection.close()]);
  }
}

if (require.main === module) {
  benchAccept().then(
    (figures) => {
      console.log(`\naccepting path${ON_CLUSTER ? ' on the local Redis Cluster' : ''}: ${ORDERS} distinct buyers over HTTP (API with its starter, worker) vs the Redis reservation alone, ${CONCURRENCY} in flight; ceiling: a bare Koa 202 to the same crowd`);
      const rates = (f: AcceptFigures) => Object.fromEntries(Object.entries(f).filter(([key]) => key !== 'cpuUsPer202'));
      console.table(Object.fromEntries(figures.map((f) => [`appendfsync ${f.appendfsync}`, rates(f)])));
      console.log('CPU µs per accepted purchase during the HTTP run, by part of the machine (crowd = the bench process):');
      console.table(Object.fromEntries(figures.map((f) => [`appendfsync ${f.appendfsync}`, f.cpuUsPer202])));
      appendResult('accept', { concurrency: CONCURRENCY, cluster: ON_CLUSTER, modes: figures });
    },
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
