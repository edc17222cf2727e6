/**
 * Benchmark of the reconciler (`npm run bench -- reconcile`; docs/design.md, "The reconciler"), with the product's
 * own Reconciler and ReconcileLoop at the configured settings, in this process, on sales of its own.
 * - Repair latency: for each kind of write-back (what a replica that missed writes holds, as a failover to it
 *   leaves the shard), BENCH_RECONCILE_SAMPLES samples, one at a time: the ms from the write-back until Redis
 *   agrees with PostgreSQL again; p50, p99 and max. A lost release and a lost reservation are written back while
 *   the order's change is recent (the incremental pass finds them) and, for the reservation, also once it is older
 *   than the incremental look-back (only a full pass can); a lost unit, a unit free twice and an old mark too.
 * - Cost: on sales of 1,000 and 10,000 live orders at rest, the CPU (this process: the reconciler's own share of
 *   a starter process) and wall time of a full pass and of an incremental pass, and the PostgreSQL queries each
 *   makes; per 10,000 live orders; and the PostgreSQL queries per second one sale costs at rest at the default
 *   intervals. The baseline, timed in the same run: a bare read of what any comparison of the two needs (the
 *   sale's live orders from PostgreSQL, its reservations, entries and stock list from Redis, nothing compared),
 *   and each pass's ratio to it.
 * Prints the figures and appends a JSON line to reports/bench.jsonl. Asserts nothing.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadConfig } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createLogger } from '../../src/infra/logger';
import { newOrderId } from '../../src/order/orderId';
import { Orders } from '../../src/order/store';
import type { OrderInput } from '../../src/order/types';
import { createRedis } from '../../src/reservation/client';
import { parseMark } from '../../src/reservation/closing';
import { saleKeys, SaleLayouts } from '../../src/reservation/layout';
import { shardPlacer } from '../../src/reservation/placement';
import { Reconciler } from '../../src/reservation/reconciler';
import { ReservationStore } from '../../src/reservation/store';
import { closedMark } from '../../src/sale/controls';
import { createSale, findSale, loadSale, type Sale } from '../../src/sale/sales';
import { ReconcileLoop } from '../../src/starter/reconcileLoop';
import { appendResult, median } from '../shared/benchResults';

const SAMPLES = Number(process.env.BENCH_RECONCILE_SAMPLES ?? 20);
const COST_PASSES = 5;
const WINDOW_MS = 600_000;
const config = loadConfig({ ...process.env, LOG_LEVEL: 'silent' });
const pool = createPool(config);
const redis = createRedis(config);
const store = new ReservationStore(redis, new SaleLayouts(pool));
const orders = new Orders(pool, store.view);
let queries = 0;
const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
(pool as { query: unknown }).query = (...args: unknown[]) => {
  queries += 1;
  return query(...args);
};
const source = {
  items: async (saleId: number) => (await findSale(pool, saleId))?.items.map(({ itemId, quantity }) => ({ itemId, quantity })) ?? [],
  mark: (saleId: number) => closedMark(pool, saleId),
};
const owner = `bench-${randomUUID()}`;
const settings = { graceMs: config.RECONCILE_GRACE_MS, everyMs: config.RECONCILE_INTERVAL_MS, fullEveryMs: config.RECONCILE_FULL_INTERVAL_MS, leaseMs: 3 * config.RECONCILE_INTERVAL_MS, owner };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.ceil((p / 100) * values.length) - 1)];

async function makeSale(quantity: number): Promise<Sale> {
  const start = Date.now() - 60_000;
  const sale = await createSale(
    pool,
    { name: `bench-reconcile-${randomUUID()}`, startsAt: new Date(start).toISOString(), endsAt: new Date(start + 3_600_000).toISOString(), paymentWindowMs: WINDOW_MS, items: [{ productId: 'p0', quantity, priceMinor: 500, currency: 'EUR' }] },
    shardPlacer(redis),
  );
  await loadSale(pool, store, sale.saleId, false);
  return sale;
}

/** Reserves and stores n live orders (their start queue entries dropped: no workflow is to start them). */
async function liveOrdersOf(sale: Sale, n: number, reservedAtMs = Date.now()): Promise<OrderInput[]> {
  const made: OrderInput[] = [];
  for (let i = 0; i < n; i += 64) {
    made.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(64, n - i) }, async () => {
          const order: OrderInput = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId: sale.items[0].itemId, userId: `bench-${randomUUID()}`, priceMinor: 500, paymentWindowMs: WINDOW_MS, reservedAtMs };
          const reserved = await store.reserve(order);
          if (reserved.kind !== 'RESERVED') throw new Error(`not reserved: ${reserved.kind}`);
          const held = { ...order, unit: reserved.unit, stockShard: 0, stockEpoch: reserved.stockEpoch };
          await orders.place(held);
          return held;
        }),
      )),
    );
  }
  await redis.del(keysOf(sale).startQueue);
  return made;
}

/** The keys of a bench sale's one stock shard. */
const keysOf = (sale: Sale) => saleKeys(sale.saleId);

/** One kind of drift made on a prepared order of a sale: @returns the check that Redis agrees with PostgreSQL again */
type Drift = (sale: Sale, order: OrderInput) => Promise<() => Promise<boolean>>;

const unitOf = (o: OrderInput) => String(o.unit);

/** An order past its deadline, expired and released, as its workflow would have done. */
async function expired(sale: Sale): Promise<OrderInput> {
  const [order] = await liveOrdersOf(sale, 1, Date.now() - WINDOW_MS - 1000);
  await orders.settle(order, Date.now());
  await store.release(order);
  return order;
}

/** What a replica that missed the order's release holds: the reservation, the entry, no unit back, no released mark. */
const lostRelease: Drift = async (sale, o) => {
  const k = keysOf(sale);
  const value = `${o.itemId}|${o.userId}|${o.reservedAtMs}|500|${WINDOW_MS}|${o.unit}|${o.stockEpoch}`;
  await redis.multi().hset(k.reservations, o.orderId, value).hset(k.buyers, o.userId, o.orderId).lrem(k.stock(o.itemId), 0, unitOf(o)).hdel(k.released, o.orderId).exec();
  return async () => (await redis.hget(k.reservations, o.orderId)) === null && (await redis.lpos(k.stock(o.itemId), unitOf(o))) !== null && (await redis.hget(k.buyers, o.userId)) === null;
};

/** What a replica that missed the order's reservation holds: neither it nor the entry, its unit free. */
const lostReservation: Drift = async (sale, o) => {
  const k = keysOf(sale);
  await redis.multi().hdel(k.reservations, o.orderId).hdel(k.buyers, o.userId).lpush(k.stock(o.itemId), unitOf(o)).exec();
  return async () => (await redis.hget(k.reservations, o.orderId)) !== null && (await redis.hget(k.buyers, o.userId)) === o.orderId && (await redis.lpos(k.stock(o.itemId), unitOf(o))) === null;
};

/** A free unit missing from the list (a release's push lost, its reservation's delete kept). */
const lostUnit: Drift = async (sale, o) => {
  const k = keysOf(sale);
  const unit = (await redis.lpop(k.stock(o.itemId))) as string;
  return async () => (await redis.lpos(k.stock(o.itemId), unit)) !== null;
};

/** A free unit listed twice. */
const unitTwice: Drift = async (sale, o) => {
  const k = keysOf(sale);
  const unit = (await redis.lindex(k.stock(o.itemId), 0)) as string;
  await redis.rpush(k.stock(o.itemId), unit);
  return async () => ((await redis.lpos(k.stock(o.itemId), unit, 'COUNT', 0)) as number[]).length === 1;
};

/** A control's mark lost: the shard holds the mark before it. */
const oldMark: Drift = async (sale) => {
  const k = keysOf(sale);
  await pool.query('UPDATE sale_events SET state_version = state_version + 1 WHERE id = $1', [sale.saleId]);
  const { version } = await closedMark(pool, sale.saleId);
  return async () => parseMark(await redis.get(k.closed))?.version === version;
};

/** The kinds of drift a round finds by the orders that changed, right after their change. */
const RECENT: Record<string, { prepare(sale: Sale): Promise<OrderInput>; drift: Drift }> = {
  'lost release': { prepare: expired, drift: lostRelease },
  'lost reservation': { prepare: (sale) => liveOrdersOf(sale, 1).then(([o]) => o), drift: lostReservation },
};
/** The kinds only a full pass finds (no order changed), made before a restart of the node, as a failover leaves them. */
const AFTER_RESTART: Record<string, Drift> = { 'lost reservation': lostReservation, 'lost unit': lostUnit, 'unit free twice': unitTwice, 'old mark': oldMark };

/** @returns the ms until each check holds, checked every 10 ms from t0 */
async function until(checks: (() => Promise<boolean>)[], t0: number): Promise<number[]> {
  return Promise.all(
    checks.map(async (check) => {
      while (!(await check())) {
        if (Date.now() - t0 > 60_000) throw new Error('not repaired in 60 s');
        await sleep(10);
      }
      return Date.now() - t0;
    }),
  );
}

/**
 * Restarts the single Redis node through the stack's script (its data back from its AOF, a new run id).
 * @returns when the new node first answered, polled every 10 ms while the script runs (the script returns later)
 */
async function restartRedis(): Promise<number> {
  const script = join(__dirname, '..', '..', 'scripts', 'services.sh');
  await promisify(execFile)('bash', [script, 'stop', 'redis']);
  let answered = 0;
  const up = promisify(execFile)('bash', [script, 'up']);
  while (!answered) {
    if ((await redis.ping().catch(() => '')) === 'PONG') answered = Date.now();
    else await sleep(10);
  }
  await up;
  return answered;
}

/** @returns per kind of drift, the ms until repaired, with the product's loop running over the bench's sales */
async function latencies(): Promise<Record<string, { p50: number; p99: number; max: number; samples: number }>> {
  const sales: number[] = [];
  // One Reconciler for every sale, as a starter process has.
  const reconciler = new Reconciler(redis, store.layouts, pool, source, settings);
  const loop = new ReconcileLoop({
    reconcile: (ids, onFailure) => reconciler.round(ids, onFailure),
    saleIds: async () => sales,
    fallbackIds: () => sales,
    everyMs: config.RECONCILE_INTERVAL_MS,
    onPass: () => undefined,
    log: createLogger('silent', 'bench'),
  });
  loop.start();
  const ms = new Map<string, number[]>();
  const record = (kind: string, values: number[]) => ms.set(kind, [...(ms.get(kind) ?? []), ...values]);
  try {
    for (const [kind, { prepare, drift }] of Object.entries(RECENT)) {
      const sale = await makeSale(SAMPLES * 2);
      sales.push(sale.saleId);
      for (let i = 0; i < SAMPLES; i++) {
        const order = await prepare(sale);
        await sleep(Math.random() * config.RECONCILE_INTERVAL_MS);
        const check = await drift(sale, order);
        record(`${kind} (the order's change)`, await until([check], Date.now()));
      }
    }
    const kinds = Object.entries(AFTER_RESTART);
    const restartSamples = Math.max(3, Math.floor(SAMPLES / 4));
    const prepared = [];
    for (let s = 0; s < restartSamples; s++) {
      const row = [];
      for (const [kind] of kinds) {
        const sale = await makeSale(10);
        sales.push(sale.saleId);
        row.push({ kind, sale, order: (await liveOrdersOf(sale, 1))[0] });
      }
      prepared.push(row);
    }
    // Past the incremental look-back at their change: only a full pass can find these.
    await sleep(config.RECONCILE_GRACE_MS + 2 * config.RECONCILE_INTERVAL_MS + 2000);
    for (const row of prepared) {
      const checks = await Promise.all(row.map(({ kind, sale, order }) => AFTER_RESTART[kind](sale, order)));
      const answered = await restartRedis();
      (await until(checks, answered)).forEach((v, i) => record(`${row[i].kind} (a restart)`, [v]));
    }
  } finally {
    await loop.stop();
  }
  const out: Record<string, { p50: number; p99: number; max: number; samples: number }> = {};
  for (const [kind, values] of ms) {
    out[kind] = { p50: median(values), p99: pct(values, 99), max: Math.max(...values), samples: values.length };
    console.log(`${kind.padEnd(36)} repaired in p50 ${out[kind].p50} ms, p99 ${out[kind].p99} ms, max ${out[kind].max} ms (${values.length} samples)`);
  }
  return out;
}

/**
 * @returns CPU and wall ms and PostgreSQL queries (medians of COST_PASSES) of a full pass, and of a round at rest
 *   (nothing changed, no full pass due), over a sale of `live` live orders
 */
async function cost(live: number): Promise<Record<'full' | 'rest' | 'bareRead', { cpuMs: number; wallMs: number; queries: number }>> {
  const sale = await makeSale(live);
  await liveOrdersOf(sale, live, Date.now() - 60_000);
  // Past the incremental look-back: at rest, a round finds no change.
  await sleep(config.RECONCILE_GRACE_MS + 2 * config.RECONCILE_INTERVAL_MS + 2000);
  const out = {} as Record<'full' | 'rest' | 'bareRead', { cpuMs: number; wallMs: number; queries: number }>;
  out.bareRead = await bareRead(sale);
  const failed = (_saleId: number, err: unknown) => {
    throw err;
  };
  for (const pass of ['full', 'rest'] as const) {
    const reconciler = new Reconciler(redis, store.layouts, pool, source, settings);
    // Its first round is the sale's full pass (due at once); the rounds after it, at rest, have nothing to do.
    if (pass === 'rest') await reconciler.round([sale.saleId], failed);
    const samples = [];
    for (let i = 0; i < COST_PASSES; i++) {
      if (pass === 'full') {
        await redis.del(keysOf(sale).fullPass);
        (reconciler as unknown as { fullDueAt: Map<number, number> }).fullDueAt.clear();
      }
      const [cpu, wall, q] = [process.cpuUsage(), performance.now(), queries];
      const passes = await reconciler.round([sale.saleId], failed);
      const used = process.cpuUsage(cpu);
      if (passes.some((p) => p.repairs.length)) throw new Error('a sale at rest needed repairs');
      if ((pass === 'full') !== (passes[0]?.full ?? false)) throw new Error(`expected a ${pass} round`);
      samples.push({ cpuMs: (used.user + used.system) / 1000, wallMs: performance.now() - wall, queries: queries - q });
    }
    out[pass] = { cpuMs: median(samples.map((s) => s.cpuMs)), wallMs: median(samples.map((s) => s.wallMs)), queries: median(samples.map((s) => s.queries)) };
    const ratio = out[pass].wallMs / out.bareRead.wallMs;
    console.log(`${live} live orders, ${pass === 'full' ? 'a full pass' : 'a round at rest'}: CPU ${out[pass].cpuMs.toFixed(1)} ms, wall ${out[pass].wallMs.toFixed(1)} ms (${ratio.toFixed(2)}× the bare read), ${out[pass].queries} PostgreSQL queries (median of ${COST_PASSES})`);
  }
  return out;
}

/** The baseline: CPU and wall ms (medians of COST_PASSES) of reading the sale's live orders and its shard's copy, nothing compared. */
async function bareRead(sale: Sale): Promise<{ cpuMs: number; wallMs: number; queries: number }> {
  const k = keysOf(sale);
  const samples = [];
  for (let i = 0; i < COST_PASSES; i++) {
    const [cpu, wall] = [process.cpuUsage(), performance.now()];
    await Promise.all([
      pool.query("SELECT id, user_id, unit, status FROM orders WHERE sale_id = $1 AND status IN ('PENDING', 'PAID')", [sale.saleId]),
      redis.hgetall(k.reservations),
      redis.hgetall(k.buyers),
      redis.lrange(k.stock(sale.items[0].itemId), 0, -1),
    ]);
    const used = process.cpuUsage(cpu);
    samples.push({ cpuMs: (used.user + used.system) / 1000, wallMs: performance.now() - wall });
  }
  const out = { cpuMs: median(samples.map((s) => s.cpuMs)), wallMs: median(samples.map((s) => s.wallMs)), queries: 1 };
  console.log(`${sale.items[0].quantity} units, the bare read (baseline): CPU ${out.cpuMs.toFixed(1)} ms, wall ${out.wallMs.toFixed(1)} ms (median of ${COST_PASSES})`);
  return out;
}

async function main(): Promise<void> {
  console.log(`reconciler: incremental every ${config.RECONCILE_INTERVAL_MS} ms, full every ${config.RECONCILE_FULL_INTERVAL_MS} ms, grace ${config.RECONCILE_GRACE_MS} ms`);
  const repair = await latencies();
  const small = await cost(1000);
  const large = await cost(10_000);
  // At rest a round per interval; one sale's full pass per full interval, across every process.
  const restQueriesPerS = (1000 / config.RECONCILE_INTERVAL_MS) * large.rest.queries + (1000 / config.RECONCILE_FULL_INTERVAL_MS) * large.full.queries;
  const restCpuPerS = (1000 / config.RECONCILE_INTERVAL_MS) * large.rest.cpuMs + (1000 / config.RECONCILE_FULL_INTERVAL_MS) * large.full.cpuMs;
  console.log(`one sale of 10,000 live orders at rest: ${restQueriesPerS.toFixed(2)} PostgreSQL queries/s, ${restCpuPerS.toFixed(1)} ms of CPU per second (${(restCpuPerS / 10).toFixed(2)} % of a core)`);
  appendResult('reconcile', { samples: SAMPLES, repair, cost: { 1000: small, 10000: large }, restQueriesPerS, restCpuPerS });
}

main()
  .catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(() => Promise.allSettled([pool.end(), redis.quit()]));
