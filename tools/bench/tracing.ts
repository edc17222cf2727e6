/**
 * Benchmark of tracing's cost on the API (`npx tsx tools/bench/tracing.ts`): the same API process four times
 * over (compiled, as deployed, each its own process, no starter in it), with tracing off (twice: the second is
 * this run's noise band, an A/A test), on for 1 % of new traces (parentbased_traceidratio 0.01, what a sale
 * would run), and on for every trace (the worst case), each writing its spans as JSON lines to a file. Each
 * is driven in turn, in rounds that rotate which goes first, by the crowd (undici over loopback, this process):
 *
 * - sold-out: BENCH_TRACING_SOLDOUT presses on a sold-out item, answered by the flag in front of the router,
 *   which is never traced: the ratio says whether tracing's presence costs that path anything;
 * - accept: BENCH_TRACING_ORDERS distinct buyers, one press each, on a fresh sale of as many units: every press
 *   a 202 through token check, reservation (reserve.lua) and start queue entry, traced as one request span and
 *   one reservation span.
 *
 * For each it prints answers per second and the API process' CPU time per answer (/proc), and the median over
 * the rounds of each target's ratio to tracing off. Nothing starts those orders (no starter runs): their start
 * queues are deleted. Then the back end's share, tracing off against on for every trace: BENCH_TRACING_DRAIN
 * orders through the target's API, a starter and a worker of the same setting (started for the round, on a
 * task queue of their own), each order expiring a second after its 202 and giving its unit back; it prints
 * orders per second to the last unit back and CPU ms per order of the worker, the starter, Temporal and
 * PostgreSQL, and their ratios. Appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_TRACING_SOLDOUT (50000), BENCH_TRACING_ORDERS (5000), BENCH_ROUNDS (5),
 * BENCH_CONNECTIONS (100), BENCH_PIN (1: the API processes on CPU 0, the crowd on CPU 1 for the API's rounds;
 * 0 leaves it to the OS), BENCH_TRACING_DRAIN (500), BENCH_TRACING_DRAIN_ROUNDS (2).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, statSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSigner } from 'fast-jwt';
import { loadConfig } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import type { Pool } from 'pg';
import { SaleLayouts, shardKeys } from '../../src/reservation/layout';
import { shardPlacer } from '../../src/reservation/placement';
import { ReservationStore } from '../../src/reservation/store';
import { createSale, loadSale } from '../../src/sale/sales';
import { appendResult, median } from '../shared/benchResults';
import { CROWD_IP_LIMIT, pressAll, saleGateOf, type Press } from '../../test/support/crowd';
import { stackPid, temporalPids, treesCpuMs } from '../shared/procCpu';
import { freePort, pinTo, startChild, until, type Child } from '../../test/support/processes';

const SOLDOUT_PRESSES = Number(process.env.BENCH_TRACING_SOLDOUT ?? 50_000);
const ORDERS = Number(process.env.BENCH_TRACING_ORDERS ?? 5000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100);

/** off-2 is off again: its ratio to off is the run's noise band. */
const TARGETS = {
  off: {},
  'off-2': {},
  'on-1%': { OTEL_TRACES_EXPORTER: 'jsonl', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' },
  'on-100%': { OTEL_TRACES_EXPORTER: 'jsonl' },
} as const;
type Target = keyof typeof TARGETS;
type Path = 'sold-out' | 'accept';

interface Figures {
  path: Path;
  target: Target;
  round: number;
  answers: number;
  /** Answers with the path's expected status (410 sold-out, 202 accept). */
  expected: number;
  perS: number;
  cpuUsPerAnswer: number;
  p99Ms: number;
}

// The API processes on CPU 0, the crowd (this process) on CPU 1, so the two do not take turns on one core.
const PIN = process.env.BENCH_PIN !== '0' && process.platform === 'linux' && cpus().length >= 2;

const DRAIN_ORDERS = Number(process.env.BENCH_TRACING_DRAIN ?? 500);
const DRAIN_ROUNDS = Number(process.env.BENCH_TRACING_DRAIN_ROUNDS ?? 2);
const DRAIN_TARGETS = ['off', 'on-100%'] as const;
const DRAIN_TIMEOUT_MS = 600_000;

interface Drain {
  target: Target;
  round: number;
  orders: number;
  perS: number;
  cpuMsPerOrder: { worker: number; starter: number; temporal: number; postgres: number };
}

/** The bench's clients, its folder, and the API processes, one per target. */
interface Bench {
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  dir: string;
  apis: Map<Target, { child: Child; url: string }>;
  /** Sales made so far whose start queues no starter is to take. */
  sales: number[];
  /** `n` presses of new buyers on the item, with their tokens. */
  presses(itemId: number, n: number): Press[];
}

function openBench(): Bench {
  const config = loadConfig({ ...process.env, LOG_LEVEL: 'silent' });
  const pool = createPool(config);
  const redis = createRedis(config);
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 });
  const run = randomUUID().slice(0, 8);
  let buyers = 0;
  const presses = (itemId: number, n: number): Press[] =>
    Array.from({ length: n }, () => {
      const buyer = `bench-tracing-${run}-${buyers++}`;
      return { buyer, token: sign({ sub: buyer }), itemId };
    });
  return { pool, redis, store: new ReservationStore(redis, new SaleLayouts(pool)), dir: mkdtempSync(join(tmpdir(), 'bench-tracing-')), apis: new Map(), sales: [], presses };
}

async function newSale(bench: Bench, quantity: number, paymentWindowMs = 600_000) {
  const now = Date.now();
  const sale = await createSale(
    bench.pool,
    { name: `bench-tracing-${randomUUID()}`, startsAt: new Date(now - 1000).toISOString(), endsAt: new Date(now + 3_600_000).toISOString(), paymentWindowMs, items: [{ productId: 'bench', quantity, priceMinor: 100, currency: 'EUR' }] },
    shardPlacer(bench.store.redis),
  );
  await loadSale(bench.pool, bench.store, sale.saleId, false);
  bench.sales.push(sale.saleId);
  return sale;
}

/** Deletes the start queues of the sales made so far: the accept rounds' orders are never started. */
async function dropStartQueues(bench: Bench): Promise<void> {
  for (const saleId of bench.sales.splice(0)) for (const tag of (await bench.store.layouts.get(saleId)).tags) await bench.redis.del(shardKeys(tag).startQueue);
}

/** Starts one API process per target, without a starter, each writing its spans to a file of its own. */
async function startApis(bench: Bench): Promise<void> {
  for (const target of Object.keys(TARGETS) as Target[]) {
    const port = await freePort();
    const env = { ...process.env, ...TARGETS[target], API_PORT: String(port), INTERNAL_API_PORT: '0', STARTER_IN_API: 'false', RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT), OTEL_TRACES_FILE: join(bench.dir, `${target}.jsonl`) };
    bench.apis.set(target, { child: startChild(target, 'dist/api/main.js', env, join(bench.dir, `${target}.log`), 'api listening'), url: `http://127.0.0.1:${port}` });
  }
  await Promise.all([...bench.apis.values()].map((a) => a.child.ready));
  if (PIN) {
    for (const { child } of bench.apis.values()) pinTo(child.process.pid as number, '0');
    pinTo(process.pid, '1');
  }
}

/** One path, target and round: the presses through that API, its CPU per answer and its rate. */
async function measure(bench: Bench, path: Path, target: Target, round: number, item: Press[], gate: string): Promise<Figures> {
  const api = bench.apis.get(target) as { child: Child; url: string };
  const pid = api.child.process.pid as number;
  const cpuBefore = treesCpuMs({ api: pid }).api;
  const started = performance.now();
  const answers = await pressAll({ baseUrl: api.url, presses: item, gate, concurrency: CONNECTIONS, rate: 0, deadlineMs: Date.now() + 120_000 });
  const seconds = (performance.now() - started) / 1000;
  const cpuMs = treesCpuMs({ api: pid }).api - cpuBefore;
  const expected = answers.filter((a) => a.status === (path === 'sold-out' ? 410 : 202)).length;
  const latencies = answers.map((a) => a.latencyMs).sort((a, b) => a - b);
  process.stderr.write(`  ${path} round ${round} ${target}: ${Math.round(answers.length / seconds)}/s\n`);
  return { path, target, round, answers: answers.length, expected, perS: answers.length / seconds, cpuUsPerAnswer: (cpuMs * 1000) / answers.length, p99Ms: latencies[Math.floor(latencies.length * 0.99)] };
}

/** The API rounds, each target in turn (rotated): sold-out presses, then accepted orders. A first round warms up. */
async function apiRounds(bench: Bench): Promise<Figures[]> {
  const targets = Object.keys(TARGETS) as Target[];
  const soldOut = await newSale(bench, 0);
  const soldOutPresses = bench.presses(soldOut.items[0].itemId, SOLDOUT_PRESSES);
  const results: Figures[] = [];
  for (let round = 0; round <= ROUNDS; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]);
    for (const target of order) {
      const gate = await saleGateOf(bench.apis.get(target)?.url as string, soldOut.saleId, Date.now() + 10_000);
      results.push(await measure(bench, 'sold-out', target, round, soldOutPresses, gate));
    }
    for (const target of order) {
      const sale = await newSale(bench, ORDERS);
      const gate = await saleGateOf(bench.apis.get(target)?.url as string, sale.saleId, Date.now() + 10_000);
      results.push(await measure(bench, 'accept', target, round, bench.presses(sale.items[0].itemId, ORDERS), gate));
    }
  }
  return results.filter((r) => r.round > 0);
}

/**
 * The back end's share: DRAIN_ORDERS orders through a starter and a worker of the target's setting, on a task
 * queue of their own; every order expires a second after its 202 and gives its unit back.
 */
async function drainRound(bench: Bench, target: Target, round: number): Promise<Drain> {
  const env = { ...process.env, ...TARGETS[target], TEMPORAL_TASK_QUEUE: `bench-tracing-${randomUUID()}`, STARTER_MAX_BACKLOG: '1000000' };
  const spans = (role: string) => ({ ...env, OTEL_TRACES_FILE: join(bench.dir, `drain-${target}-${role}.jsonl`) });
  const worker = startChild('worker', 'dist/worker/main.js', spans('worker'), join(bench.dir, `drain-${target}-worker.log`), 'worker running');
  const starter = startChild('starter', 'dist/starter/main.js', spans('starter'), join(bench.dir, `drain-${target}-starter.log`), 'starter running');
  try {
    await Promise.all([worker.ready, starter.ready]);
    const sale = await newSale(bench, DRAIN_ORDERS, 1000);
    const itemId = sale.items[0].itemId;
    const stockKey = shardKeys((await bench.store.layouts.get(sale.saleId)).tags[0]).stock(itemId);
    const parts = { worker: worker.process.pid as number, starter: starter.process.pid as number, temporal: temporalPids(), postgres: stackPid('pg/data/postmaster.pid') };
    const before = treesCpuMs(parts);
    const started = performance.now();
    const url = bench.apis.get(target)?.url as string;
    const answers = await pressAll({ baseUrl: url, presses: bench.presses(itemId, DRAIN_ORDERS), gate: await saleGateOf(url, sale.saleId, Date.now() + 10_000), concurrency: CONNECTIONS, rate: 0, deadlineMs: Date.now() + 120_000 });
    // Every unit back in stock: every order placed, expired and compensated.
    await until('every unit back in stock', async () => (await bench.redis.llen(stockKey)) === DRAIN_ORDERS, DRAIN_TIMEOUT_MS);
    const seconds = (performance.now() - started) / 1000;
    const after = treesCpuMs(parts);
    const perOrder = (part: keyof typeof parts) => (after[part] - before[part]) / DRAIN_ORDERS;
    process.stderr.write(`  drain round ${round} ${target}: ${(DRAIN_ORDERS / seconds).toFixed(1)} orders/s\n`);
    return { target, round, orders: answers.filter((a) => a.status === 202).length, perS: DRAIN_ORDERS / seconds, cpuMsPerOrder: { worker: perOrder('worker'), starter: perOrder('starter'), temporal: perOrder('temporal'), postgres: perOrder('postgres') } };
  } finally {
    await Promise.allSettled([starter.stop(), worker.stop()]);
  }
}

/** Prints the API rounds' ratios to `off`. @returns them by path and target */
function reportApi(measured: Figures[], loadBefore: number) {
  const of = (path: Path, target: Target, round: number) => measured.find((r) => r.path === path && r.target === target && r.round === round) as Figures;
  const ratios = (path: Path, target: Target, value: (f: Figures) => number) =>
    Array.from({ length: ROUNDS }, (_, i) => value(of(path, target, i + 1)) / value(of(path, 'off', i + 1)));
  console.log(
    `\ntracing's cost on the API: ${SOLDOUT_PRESSES} sold-out presses and ${ORDERS} accepted orders per target and round, ${ROUNDS} rounds, ${CONNECTIONS} connections, node ${process.version}, ${cpus().length} CPUs, load before ${loadBefore.toFixed(2)}, ${PIN ? 'APIs pinned to CPU 0, crowd to CPU 1' : 'not pinned'}`,
  );
  console.table(measured.map((r) => ({ path: r.path, round: r.round, target: r.target, 'answers/s': Math.round(r.perS), 'cpu µs/answer': Number(r.cpuUsPerAnswer.toFixed(1)), 'p99 ms': Number(r.p99Ms.toFixed(1)), answers: r.answers, expected: r.expected })));
  const summary: Record<string, Record<string, { rate: number; cpu: number }>> = {};
  for (const path of ['sold-out', 'accept'] as Path[]) {
    summary[path] = {};
    for (const target of (Object.keys(TARGETS) as Target[]).filter((t) => t !== 'off')) {
      const rate = median(ratios(path, target, (f) => f.perS));
      const cpu = median(ratios(path, target, (f) => f.cpuUsPerAnswer));
      summary[path][target] = { rate, cpu };
      console.log(`${path} ${target}/off: answers/s ${rate.toFixed(3)}, API CPU per answer ${cpu.toFixed(3)} (median of ${ROUNDS} rounds)`);
    }
  }
  return summary;
}

/** Prints the drain rounds and their ratios on-100%/off. @returns the ratios */
function reportDrains(drains: Drain[]) {
  console.table(
    drains.map((d) => ({ round: d.round, target: d.target, 'orders/s': Number(d.perS.toFixed(1)), ...Object.fromEntries(Object.entries(d.cpuMsPerOrder).map(([k, v]) => [`${k} ms/order`, Number(v.toFixed(2))])) })),
  );
  const drainOf = (target: Target, round: number) => drains.find((d) => d.target === target && d.round === round) as Drain;
  const drainRatio = (value: (d: Drain) => number) => median(Array.from({ length: DRAIN_ROUNDS }, (_, i) => value(drainOf('on-100%', i + 1)) / value(drainOf('off', i + 1))));
  const drainRatios = {
    perS: drainRatio((d) => d.perS),
    ...(Object.fromEntries((['worker', 'starter', 'temporal', 'postgres'] as const).map((k) => [k, drainRatio((d) => d.cpuMsPerOrder[k])])) as Record<keyof Drain['cpuMsPerOrder'], number>),
  };
  console.log(
    `drain of ${DRAIN_ORDERS} orders (placed, expired, compensated) per round, on-100%/off, median of ${DRAIN_ROUNDS} rounds: orders/s ${drainRatios.perS.toFixed(3)}; CPU per order: worker ${drainRatios.worker.toFixed(3)}, starter ${drainRatios.starter.toFixed(3)}, Temporal ${drainRatios.temporal.toFixed(3)}, PostgreSQL ${drainRatios.postgres.toFixed(3)}`,
  );
  return drainRatios;
}

async function main(): Promise<void> {
  const loadBefore = loadavg()[0];
  const bench = openBench();
  let measured: Figures[];
  const drains: Drain[] = [];
  try {
    await startApis(bench);
    measured = await apiRounds(bench);
    // No starter was to start these orders: their start queues go before the drain's starters run.
    await dropStartQueues(bench);
    if (PIN) pinTo(process.pid, `0-${cpus().length - 1}`);
    for (let round = 1; round <= DRAIN_ROUNDS; round++) {
      for (const target of round % 2 ? DRAIN_TARGETS : [...DRAIN_TARGETS].reverse()) drains.push(await drainRound(bench, target, round));
    }
  } finally {
    await Promise.allSettled([...bench.apis.values()].map((a) => a.child.stop()));
    await dropStartQueues(bench);
    await Promise.allSettled([bench.pool.end(), bench.redis.quit()]);
  }
  const summary = reportApi(measured, loadBefore);
  const drainRatios = reportDrains(drains);
  const spanBytes = (target: Target) => statSync(join(bench.dir, `${target}.jsonl`), { throwIfNoEntry: false })?.size ?? 0;
  console.log(`span files: on-1% ${spanBytes('on-1%')} bytes, on-100% ${spanBytes('on-100%')} bytes (${bench.dir})`);
  appendResult('tracing', { loadavgBefore: loadBefore, soldOutPresses: SOLDOUT_PRESSES, orders: ORDERS, rounds: ROUNDS, connections: CONNECTIONS, results: measured, ratios: summary, drains, drainRatios });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
