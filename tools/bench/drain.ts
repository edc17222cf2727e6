/**
 * Benchmark of what one order costs Temporal, the worker and PostgreSQL (`npx tsx tools/bench/drain.ts`): N orders
 * through the real orderWorkflow on the stack's Temporal, one worker process, and in the same run N minimal
 * workflows (start → one no-op activity → complete) on the same server and worker process as the baseline. Each order
 * has its unit reserved in Redis first. Every other one is paid by the `paid` signal once its row is in
 * PostgreSQL (as a payment service that reacts to OrderPlaced), in a sale with a 10 min payment window; the
 * rest are in a sale with a payment window of BENCH_DRAIN_WINDOW_MS, longer than the backlog so that each
 * first runs before its deadline, and expire and are compensated. For each kind it prints,
 * per workflow: workflow tasks and history events (from a sample of histories), CPU ms of the Temporal server,
 * of the worker and of PostgreSQL (read from /proc), completed workflows per second, and the worker's sticky
 * cache misses and evictions (Core's metrics: a miss is a run replayed from its history); then each order
 * figure as a ratio to the minimal workflow's; then each kind alone (paid by signal once stored; paid by the payment
 * client's signal-with-start before any start, docs/design.md "Payments before the start"; expired), each with
 * ORDERS orders; then the same orders again, started by the product's starter
 * from the start queues, in a process of its own (as the API's, apart from the worker), with the starter's CPU. All of it
 * on the dev server, then, when `services.sh up --temporal-server` made it, on the real server (its four
 * processes' CPU as Temporal's; its persistence is the stack's PostgreSQL, so PostgreSQL's CPU there includes
 * Temporal's own writes; the actions its `action` metric counted), and each figure of the real server as a ratio to the dev server's. Appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_DRAIN_ORDERS (1000), BENCH_DRAIN_IN_FLIGHT (100 starts in flight),
 * BENCH_DRAIN_WINDOW_MS (60000), BENCH_DRAIN_SAMPLE (40 histories per kind).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { loadConfig } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { freePort, startChild } from '../../test/support/processes';
import type { OrderInput } from '../../src/order/types';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis } from '../../src/reservation/client';
import { saleKeys } from '../../src/reservation/layout';
import { SaleLayouts } from '../../src/reservation/layout';
import { createSale, loadSale } from '../../src/sale/sales';
import { connectTemporal, startInTurn, startOrderWorkflow } from '../../src/workflows/client';
import { newOrderId } from '../../src/order/orderId';
import { Orders } from '../../src/order/store';
import { PaymentClient } from '../../src/payments/client';
import { paidSignal } from '../../src/workflows/definitions';
import { onRealServer, realServerMetrics, realServerPort, stackPid, temporalPids, treesCpuMs } from '../shared/procCpu';
import { counter } from '../../test/support/promText';
import { appendResult } from '../shared/benchResults';
import { shardPlacer } from '../../src/reservation/placement';

const ORDERS = Number(process.env.BENCH_DRAIN_ORDERS ?? 1000);
const IN_FLIGHT = Number(process.env.BENCH_DRAIN_IN_FLIGHT ?? 100);
const WINDOW_MS = Number(process.env.BENCH_DRAIN_WINDOW_MS ?? 60_000);
const SAMPLE = Number(process.env.BENCH_DRAIN_SAMPLE ?? 40);
const PRICE = 500;
const PAID_WINDOW_MS = 600_000;

/** Per-workflow figures of one kind. */
export interface KindFigures {
  workflows: number;
  workflowTasks: number;
  historyEvents: number;
  temporalCpuMs: number;
  workerCpuMs: number;
  /** A starter process of its own (0 when the bench or the worker starts the workflows). */
  starterCpuMs: number;
  postgresCpuMs: number;
  /** Temporal + worker + starter + PostgreSQL. */
  totalCpuMs: number;
  completedPerS: number;
  /** Sticky cache misses per workflow: a workflow task for a run the worker did not hold (replayed from history). */
  stickyMisses: number;
  /** Runs the worker evicted from its cache to make room, per workflow. */
  cacheEvictions: number;
  /**
   * Actions per workflow as the server counts them (its `action` metric, what Temporal Cloud bills and rate-limits
   * by); 0 where not measured (the dev server exports no metrics here).
   */
  actions: number;
}

/** The processes a run is charged to, and where the worker's metrics are. */
interface Target {
  temporal: number[];
  worker: number;
  /** A starter process of its own, when one starts the workflows. */
  starter?: number;
  metrics: string;
  /** The server's own Prometheus endpoints (the real server's four services), none for the dev server. */
  serverMetrics: string[];
}

/**
 * Runs `work` (which makes `count` workflows of one kind start: itself, or through a starter) and measures until
 * all `count` exist and none of them runs any more.
 */
async function measure(temporal: Client, query: string, count: number, target: Target, work: () => Promise<string[]>): Promise<KindFigures> {
  const scrape = async () => {
    const text = await (await fetch(target.metrics)).text();
    return { misses: counter(text, 'temporal_sticky_cache_miss'), evictions: counter(text, 'temporal_sticky_cache_total_forced_eviction') };
  };
  const actionsSoFar = async () => (await Promise.all(target.serverMetrics.map(async (url) => counter(await (await fetch(url)).text(), 'action')))).reduce((a, b) => a + b, 0);
  const cacheBefore = await scrape();
  const actionsBefore = await actionsSoFar();
  const roots = { temporal: target.temporal, worker: target.worker, starter: target.starter ?? [], postgres: stackPid('pg/data/postmaster.pid') };
  const before = treesCpuMs(roots);
  const t0 = Date.now();
  const ids = await work();
  while ((await temporal.workflow.count(query)).count < count || (await temporal.workflow.count(`${query} AND ExecutionStatus = "Running"`)).count > 0) {
    await new Promise((r) => setTimeout(r, 250));
  }
  const seconds = (Date.now() - t0) / 1000;
  const per = (ms: number) => Math.round((ms / count) * 100) / 100;
  const after = treesCpuMs(roots);
  const cpu = { temporal: per(after.temporal - before.temporal), worker: per(after.worker - before.worker), starter: per(after.starter - before.starter), postgres: per(after.postgres - before.postgres) };
  const cacheAfter = await scrape();
  const actions = per((await actionsSoFar()) - actionsBefore);
  // Histories are read after the CPU figures, so reading them is not charged to the workflows.
  let tasks = 0;
  let events = 0;
  const sample = ids.filter((_, i) => i % Math.max(1, Math.floor(ids.length / SAMPLE)) === 0).slice(0, SAMPLE);
  for (const id of sample) {
    const history = await temporal.workflow.getHandle(id).fetchHistory();
    events += history.events?.length ?? 0;
    tasks += (history.events ?? []).filter((e) => e.workflowTaskCompletedEventAttributes).length;
  }
  return {
    workflows: count,
    workflowTasks: Math.round((tasks / sample.length) * 100) / 100,
    historyEvents: Math.round((events / sample.length) * 100) / 100,
    temporalCpuMs: cpu.temporal,
    workerCpuMs: cpu.worker,
    starterCpuMs: cpu.starter,
    postgresCpuMs: cpu.postgres,
    totalCpuMs: Math.round((cpu.temporal + cpu.worker + cpu.starter + cpu.postgres) * 100) / 100,
    completedPerS: Math.round((count / seconds) * 10) / 10,
    stickyMisses: per(cacheAfter.misses - cacheBefore.misses),
    cacheEvictions: per(cacheAfter.evictions - cacheBefore.evictions),
    actions,
  };
}

/** Runs `start(i)` for i < count with at most IN_FLIGHT in flight. */
async function startAll(count: number, start: (i: number) => Promise<string>): Promise<string[]> {
  const ids: string[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(IN_FLIGHT, count) }, async () => {
      while (next < count) {
        const i = next++;
        ids[i] = await start(i);
      }
    }),
  );
  return ids;
}

/** @returns each figure of `b` as a ratio to `a`'s (0 where `a` has none) */
function ratios(a: KindFigures, b: KindFigures): Record<string, number> {
  return Object.fromEntries(
    (Object.keys(a) as (keyof KindFigures)[]).filter((k) => k !== 'workflows').map((k) => [k, a[k] ? Math.round((b[k] / a[k]) * 100) / 100 : 0]),
  );
}

/** The stack's clients on one Temporal, a drain worker process on a task queue of its own, and the worker's target. */
interface Rig {
  taskQueue: string;
  baselineQueue: string;
  env: NodeJS.ProcessEnv;
  pool: ReturnType<typeof createPool>;
  redis: ReturnType<typeof createRedis>;
  store: ReservationStore;
  temporal: Client;
  target: Target;
  logDir: string;
  close(): Promise<void>;
}

/**
 * @param temporalPort the frontend of the Temporal to measure (default: TEMPORAL_PORT, the dev server's)
 */
async function rig(temporalPort: string | undefined): Promise<Rig> {
  const taskQueue = `bench-drain-${randomUUID()}`;
  const baselineQueue = `${taskQueue}-baseline`;
  const env = { ...process.env, ...(temporalPort && { TEMPORAL_PORT: temporalPort }) };
  const config = loadConfig({ ...env, LOG_LEVEL: 'warn', TEMPORAL_TASK_QUEUE: taskQueue });
  const pool = createPool(config);
  const redis = createRedis(config);
  const temporal = await connectTemporal(config);
  const logDir = mkdtempSync(join(tmpdir(), 'bench-drain-'));
  const metricsPort = await freePort();
  const worker = startChild(
    'drain worker',
    'tools/bench/drainWorker.ts',
    { ...env, TEMPORAL_TASK_QUEUE: taskQueue, BENCH_DRAIN_BASELINE_QUEUE: baselineQueue, LOG_LEVEL: 'warn', WORKER_METRICS_PORT: String(metricsPort) },
    join(logDir, 'worker.log'),
    'drain worker running',
  );
  const close = async () => {
    await worker.stop();
    await Promise.allSettled([pool.end(), redis.quit(), temporal.connection.close()]);
  };
  await worker.ready.catch(async (err: unknown) => {
    await close();
    throw err;
  });
  const target = {
    temporal: temporalPids(env),
    worker: worker.process.pid as number,
    metrics: `http://127.0.0.1:${metricsPort}/metrics`,
    serverMetrics: onRealServer(temporalPort) ? realServerMetrics() : [],
  };
  return { taskQueue, baselineQueue, env, pool, redis, store: new ReservationStore(redis, new SaleLayouts(pool)), temporal, target, logDir, close };
}

/**
 * ORDERS orders, paid by signal (payment window 10 min) or expiring after WINDOW_MS (`paid`: half of each, all
 * paid, none paid), each with its unit reserved in Redis first (its start queue entry written with it).
 * `startedBy` 'bench': the bench starts each workflow itself, IN_FLIGHT at once, and the queue entries are
 * dropped, and the signal is sent once the order is stored; 'queue': a starter process starts them from the
 * start queues, the signal as for 'bench'; 'payment': the payment client's signal-with-start creates each paid
 * order's workflow right after its reservation (its lookup here Orders.find, not the API's door: not charged),
 * and the bench, as the starter in its turn, ends its start delay at once (startInTurn).
 */
async function runOrders(r: Rig, startedBy: 'bench' | 'queue' | 'payment', paidShare: 'half' | 'all' | 'none' = 'half'): Promise<KindFigures> {
  const newSale = async (paymentWindowMs: number) => {
    const now = Date.now();
    const sale = await createSale(r.pool, {
      name: `bench-drain-${randomUUID()}`,
      startsAt: new Date(now - 1000).toISOString(),
      endsAt: new Date(now + 3_600_000).toISOString(),
      paymentWindowMs,
      items: [{ productId: 'bench', quantity: ORDERS, priceMinor: PRICE, currency: 'EUR' }],
    }, shardPlacer(r.store.redis));
    await loadSale(r.pool, r.store, sale.saleId, false);
    return { saleId: sale.saleId, itemId: sale.items[0].itemId, paymentWindowMs };
  };
  const paidSale = await newSale(PAID_WINDOW_MS);
  const expiringSale = await newSale(WINDOW_MS);
  const toPay = new Set<string>();
  const orders = new Orders(r.pool, r.store.view);
  const payments = new PaymentClient(r.temporal, { taskQueue: r.taskQueue, lookUp: async (id) => { const order = await orders.find(id); return order && { order }; }, callTimeoutMs: 60_000 });
  let reserving = true;
  // The payment service: pays each order of the paid sale once PostgreSQL has it, looking every 200 ms.
  const paying = (async () => {
    while (reserving || toPay.size) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const stored = await r.pool.query<{ id: string }>('SELECT id FROM orders WHERE id = ANY($1::uuid[])', [[...toPay]]);
      for (const { id } of stored.rows) {
        // A starter stores the order, then starts its workflow: signalled again at the next look until it runs.
        const sent = await r.temporal.workflow.getHandle(id).signal(paidSignal, { paymentId: `pay-${id}`, amount: PRICE }).then(
          () => true,
          (err: unknown) => (err instanceof WorkflowNotFoundError ? false : Promise.reject(err)),
        );
        if (sent) toPay.delete(id);
      }
    }
  })();
  const figures = await measure(r.temporal, `SaleId IN (${paidSale.saleId}, ${expiringSale.saleId})`, ORDERS, r.target, async () => {
    const ids = await startAll(ORDERS, async (i) => {
      const paid = paidShare === 'all' || (paidShare === 'half' && i % 2 === 0);
      const sale = paid ? paidSale : expiringSale;
      const input: OrderInput = { orderId: newOrderId(sale.saleId), userId: `drain-${i}`, priceMinor: PRICE, reservedAtMs: Date.now(), ...sale };
      const outcome = await r.store.reserve(input);
      if (outcome.kind !== 'RESERVED') throw new Error(`order ${i} not reserved: ${outcome.kind}`);
      // The workflow gets the order as its start queue entry would hand it: with the unit Redis gave it.
      if (startedBy === 'bench') await startOrderWorkflow(r.temporal, r.taskQueue, { ...input, unit: outcome.unit, stockShard: outcome.stockShard, stockEpoch: outcome.stockEpoch });
      if (paid && startedBy === 'payment') {
        const answer = await payments.signalPaid(input.orderId, { paymentId: `pay-${input.orderId}`, amount: PRICE });
        if (!('signalled' in answer)) throw new Error(`order ${i}: payment not signalled: ${JSON.stringify(answer)}`);
        // The drain's turn at once: the run the payment created waits for it (or the deadline, 10 min here).
        await startInTurn(r.temporal, r.taskQueue, { ...input, unit: outcome.unit, stockShard: outcome.stockShard, stockEpoch: outcome.stockEpoch });
      } else if (paid) toPay.add(input.orderId);
      return input.orderId;
    });
    reserving = false;
    await paying;
    return ids;
  });
  // Entries the bench or the payments started are for no starter.
  if (startedBy !== 'queue') await r.redis.del(saleKeys(paidSale.saleId).startQueue, saleKeys(expiringSale.saleId).startQueue);
  return figures;
}

/** The order's kinds one at a time: paid by signal (started by the bench, or by the payment), expiring. */
interface ByKind {
  paidBenchStarts: KindFigures;
  paidPaymentStarts: KindFigures;
  expiring: KindFigures;
}

/** Order and minimal workflows on one Temporal, the bench starting both; then the order's kinds one at a time. */
async function benchDrain(temporalPort?: string): Promise<{ minimal: KindFigures; order: KindFigures; ratio: Record<string, number>; byKind: ByKind }> {
  const r = await rig(temporalPort);
  try {
    const minimal = await measure(r.temporal, `TaskQueue = "${r.baselineQueue}" AND WorkflowType = "minimalWorkflow"`, ORDERS, r.target, () =>
      startAll(ORDERS, async () => {
        const handle = await r.temporal.workflow.start('minimalWorkflow', { workflowId: randomUUID(), taskQueue: r.baselineQueue, args: [] });
        return handle.workflowId;
      }),
    );
    const order = await runOrders(r, 'bench');
    const byKind = { paidBenchStarts: await runOrders(r, 'bench', 'all'), paidPaymentStarts: await runOrders(r, 'payment', 'all'), expiring: await runOrders(r, 'bench', 'none') };
    return { minimal, order, ratio: ratios(minimal, order), byKind };
  } finally {
    await r.close();
  }
}

/** Orders started by the product's starter in a process of its own (`dist/starter/main.js`, as the API's runs beside the purchases). */
async function benchStarter(temporalPort: string | undefined): Promise<KindFigures> {
  const r = await rig(temporalPort);
  const starter = startChild('starter', 'dist/starter/main.js', { ...r.env, TEMPORAL_TASK_QUEUE: r.taskQueue, LOG_LEVEL: 'info' }, join(r.logDir, 'starter.log'), 'starter running');
  try {
    await starter.ready;
    r.target.starter = starter.process.pid as number;
    return await runOrders(r, 'queue');
  } finally {
    await starter.stop();
    await r.close();
  }
}

/**
 * The dev server, then the real server when `services.sh up --temporal-server` made it: on each, the orders
 * against the minimal workflow, then the orders started by a starter process; one run, side by side.
 */
async function main(): Promise<void> {
  const realPort = realServerPort();
  const servers: [string, string | undefined][] = [['dev server', undefined], ...(realPort ? [['real server', realPort] as [string, string]] : [])];
  const figures: Record<string, Awaited<ReturnType<typeof benchDrain>> & { starter: KindFigures }> = {};
  for (const [name, port] of servers) {
    const base = await benchDrain(port);
    const starter = await benchStarter(port);
    figures[name] = { ...base, starter };
    console.log(`\norder cost on the ${name}: ${ORDERS} orders (half paid by signal once stored, half expired after ${WINDOW_MS} ms) vs ${ORDERS} minimal workflows, one worker; started by the bench (${IN_FLIGHT} in flight), then by a starter process`);
    console.table({ minimal: base.minimal, 'order (bench starts)': base.order, 'order / minimal': base.ratio, 'order (starter process)': starter });
    const { paidBenchStarts, paidPaymentStarts, expiring } = base.byKind;
    console.log(`by kind on the ${name}: paid by signal once stored (bench starts), paid by signal-with-start before any start (the payment client), expired`);
    console.table({ 'paid, bench starts': paidBenchStarts, 'paid, payment starts': paidPaymentStarts, 'payment starts / bench starts': ratios(paidBenchStarts, paidPaymentStarts), expired: expiring });
  }
  const real = figures['real server'];
  const dev = figures['dev server'];
  const realOverDev = real && { order: ratios(dev.order, real.order), minimal: ratios(dev.minimal, real.minimal), 'starter process': ratios(dev.starter, real.starter) };
  if (realOverDev) {
    console.log('\nreal server / dev server');
    console.table(realOverDev);
  } else {
    console.log('\n(the real Temporal server is not up: `bash scripts/services.sh up --temporal-server` adds it to this bench)');
  }
  appendResult('drain', { orders: ORDERS, inFlight: IN_FLIGHT, windowMs: WINDOW_MS, ...dev, ...(real && { realServer: real, realOverDev }) });
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
