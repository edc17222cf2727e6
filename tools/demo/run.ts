/**
 * The main job: a whole flash sale on the real stack. Creates a sale, starts the API and the worker as processes,
 * lets a crowd of buyers with real signed JWTs press "buy" at the sale's start, pays a share of the accepted orders
 * (payments.ts: half through the payment route, half through the `paid` signal once stored), lets the rest
 * expire, sends a second wave of new buyers for the units that came back (all paid through the route), then
 * audits every store and writes a report (JSON and Markdown, report.ts) under reports/, with what wave 1's drain
 * cost (figures.ts) and what every order's history holds (histories.ts).
 */
import { randomInt, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { createSigner } from 'fast-jwt';
import { auditSale } from '../../src/audit';
import type { Config } from '../../src/config';
import { createKafka } from '../../src/infra/kafka';
import { shardPlacer } from '../../src/reservation/placement';
import { StartQueue } from '../../src/reservation/startQueue';
import { createSale, loadSale } from '../../src/sale/sales';
import { pressAll, saleGateOf, type Press, type PressResult } from '../../test/support/crowd';
import { latestResult } from '../shared/benchResults';
import { MACHINE_PARTS, machineCpu, onRealServer } from '../shared/procCpu';
import { perOrder, serverCounters, serverFigures, signalFates, summarize, withMax, workerTaskMetrics, type ServerReading, type StackCpu } from './figures';
import { scanHistories } from './histories';
import { LEGEND, startLiveLine } from './live';
import { PaymentService } from './payments';
import { BuyerCancels } from './cancels';
import { renderMarkdown } from './report';
import { closeRun, openRun, startProcesses, type Run, type Urls } from './stack';
import type { CancelTally, DemoOptions, DemoResult, WaveSummary } from './types';

export { DEFAULT_DEMO, type DemoOptions, type DemoResult } from './types';

const SALE_OPENS_IN_MS = 4000;
const WARMUP_PRESSES = 5000;
const STAMPEDE_SAMPLE_MS = 250;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The sale under way, and what the run has seen of it. */
interface Sale {
  saleId: number;
  itemIds: number[];
  totalUnits: number;
  saleStartMs: number;
  runTag: string;
  /** Accepted orders, in the order their 202 came. */
  accepted: string[];
  /** Presses answered, by HTTP status. */
  counts: Record<string, number>;
  /** What the live line says the run waits for. */
  phase: { wave: 1 | 2; settling: boolean };
  queue: StartQueue;
}

/** Wave 1 as measured: its summary, its drain and what the machine spent on it. */
interface Wave1 {
  summary: WaveSummary;
  results: PressResult[];
  accepted: number;
  lastStartedMs: number;
  /** From the sale's start to the last order stored (ms), null for none. */
  lastPersistedMs: number | null;
  msToFinal: number;
  cpuAtStart: StackCpu;
  cpuAtFinal: StackCpu;
  atSoldOut: StackCpu;
  gate: string | undefined;
  serverAtStart: ServerReading | undefined;
  cancels: CancelTally;
}

/** Signs `count` buyer tokens (HS256, 2 h) the way an identity provider would; subjects are prefix + index. */
function signTokens(config: Config, prefix: string, count: number): string[] {
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 2 * 3_600_000 });
  return Array.from({ length: count }, (_, i) => sign({ sub: `${prefix}${i}` }));
}

function shuffle<T>(list: T[]): T[] {
  for (let i = list.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [list[i], list[j]] = [list[j], list[i]];
  }
  return list;
}

/** Runs the whole sale. @throws when the stack is not up or a process does not start */
export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const run = await openRun(options);
  let payer: PaymentService | undefined;
  let stopLive = () => undefined as void;
  try {
    const { print } = options;
    print(`signing ${options.buyers + options.secondWaveBuyers} buyer tokens…`);
    const runTag = randomUUID().slice(0, 8);
    const wave1Tokens = signTokens(run.config, `buyer-${runTag}-`, options.buyers);
    const wave2Tokens = signTokens(run.config, `late-${runTag}-`, options.secondWaveBuyers);
    print('starting the API and the worker…');
    const urls = await startProcesses(run);
    const sale = await openSale(run, urls, runTag);
    payer = new PaymentService({
      temporal: run.temporal,
      taskQueue: run.config.TEMPORAL_TASK_QUEUE,
      paymentsUrl: urls.paymentsUrl,
      token: run.config.PAYMENT_SERVICE_TOKEN,
      priceMinor: options.priceMinor,
      paymentWindowMs: options.paymentWindowMs,
      hardStopMs: run.hardStopMs,
      declineShare: options.declineShare,
    });
    print(LEGEND);
    stopLive = startLiveLine(print, liveLine(run, sale, payer, Date.now()));
    const wave1 = await runWave1(run, urls, sale, payer, wave1Tokens);
    const wave2 = await runWave2(run, urls, sale, payer, wave2Tokens, wave1.gate);
    stopLive();
    return await report(run, urls, sale, payer, wave1, wave2);
  } finally {
    stopLive();
    await payer?.close();
    await closeRun(run);
  }
}

/**
 * Creates and loads the sale, opening SALE_OPENS_IN_MS from now, and warms the API, started a moment ago where a
 * real one has served traffic for a while (JIT, connections, token checks): presses from other buyers before the
 * sale opens, each refused 403 SALE_NOT_ACTIVE, which changes nothing (I7).
 */
async function openSale(run: Run, urls: Urls, runTag: string): Promise<Sale> {
  const { options, pool, store, config } = run;
  const saleStartMs = Date.now() + SALE_OPENS_IN_MS;
  const sale = await createSale(pool, {
    name: `demo ${run.runId}`,
    startsAt: new Date(saleStartMs).toISOString(),
    endsAt: new Date(saleStartMs + options.maxDurationMs).toISOString(),
    paymentWindowMs: options.paymentWindowMs,
    items: Array.from({ length: options.items }, (_, i) => ({ productId: `item-${i + 1}`, quantity: options.quantity, priceMinor: options.priceMinor, currency: 'EUR', stockShards: options.stockShards })),
  }, shardPlacer(store.redis));
  await loadSale(pool, store, sale.saleId, false);
  options.print(`sale ${sale.saleId}: ${options.items} item(s) × ${options.quantity} units, payment window ${options.paymentWindowMs} ms, opens in ${SALE_OPENS_IN_MS / 1000} s`);
  const warmup = signTokens(config, `warmup-${runTag}-`, WARMUP_PRESSES).map((token, i) => ({ token, buyer: `warmup-${i}`, itemId: sale.items[0].itemId }));
  const warmed = await pressAll({ baseUrl: urls.baseUrl, presses: warmup, concurrency: options.concurrency, rate: 0, deadlineMs: saleStartMs - 200 });
  options.print(`API warmed: ${warmed.filter((r) => r.status === 403).length} presses before the start refused 403`);
  const itemIds = sale.items.map((i) => i.itemId);
  return { saleId: sale.saleId, itemIds, totalUnits: options.quantity * options.items, saleStartMs, runTag, accepted: [], counts: {}, phase: { wave: 1, settling: false }, queue: new StartQueue(run.redis, store.layouts) };
}

/**
 * Counts each answer; hands a share of the 202s to the payment service, and (wave 1) a share of the others to
 * buyers who cancel and buy again.
 * @param signalShare of the paid orders, the share paid by the `paid` signal once stored (the rest by the route)
 * @param cancels the cancelling buyers, the share of all orders they take, and each buyer's press
 */
function onResult(sale: Sale, payer: PaymentService, payShare: number, signalShare: number, cancels?: { buyers: BuyerCancels; share: number; pressOf: Map<string, Press> }) {
  return (r: PressResult) => {
    sale.counts[r.status] = (sale.counts[r.status] ?? 0) + 1;
    if (r.status !== 202 || !r.orderId) return;
    sale.accepted.push(r.orderId);
    if (r.paymentDeadlineMs === undefined) throw new Error(`202 for order ${r.orderId} without a paymentDeadline`);
    if (Math.random() < payShare) return payer.pay(r.orderId, r.paymentDeadlineMs, Math.random() < signalShare, cancels !== undefined);
    const press = cancels?.pressOf.get(r.buyer);
    if (cancels && press && Math.random() < cancels.share / (1 - payShare)) payer.track(cancels.buyers.cancel(r.orderId, press.token, press.itemId));
  };
}

async function dbCounts(run: Run, sale: Sale): Promise<Record<string, number>> {
  const res = await run.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [sale.saleId]);
  return Object.fromEntries(res.rows.map((r) => [r.status, r.n]));
}

/** @returns accepted orders whose workflow is not started yet (their start queue entries) */
async function queued(sale: Sale): Promise<number> {
  return (await sale.queue.depth(sale.saleId, Date.now())).waiting;
}

const running = async (run: Run, sale: Sale) => (await run.temporal.workflow.count(`SaleId = ${sale.saleId} AND ExecutionStatus = "Running"`)).count;

/** Waits until `expected` orders are stored, none pending, every workflow started and ended. */
async function waitAllFinal(run: Run, sale: Sale, payer: PaymentService, expected: number): Promise<void> {
  while (Date.now() < run.hardStopMs) {
    await payer.settled();
    const db = await dbCounts(run, sale);
    const rows = Object.values(db).reduce((a, b) => a + b, 0);
    // PostgreSQL turns final a moment before the workflow publishes its last event and completes, and the payment
    // route stores (and settles) orders whose workflow is still in the start queue.
    if (rows >= expected && !db.PENDING && (await queued(sale)) === 0 && (await running(run, sale)) === 0) return;
    await sleep(500);
  }
  throw new Error('orders did not all reach a final state before maxDurationMs');
}

/** The live line: what the run waits for, the answers so far, the start queue, the rows by state, the payments. */
function liveLine(run: Run, sale: Sale, payer: PaymentService, t0: number): () => Promise<string> {
  return async () => {
    const [db, toStart, stillRunning] = await Promise.all([dbCounts(run, sale), queued(sale), sale.phase.settling ? running(run, sale).catch(() => undefined) : undefined]);
    const { counts, phase } = sale;
    const answered = Object.values(counts).reduce((a, b) => a + b, 0);
    const stored = Object.values(db).reduce((a, b) => a + b, 0);
    const notFinal = sale.accepted.length - (db.PAID ?? 0) - (db.EXPIRED ?? 0) - (db.REJECTED ?? 0);
    const doing = !phase.settling
      ? `wave ${phase.wave}: buyers pressing`
      : notFinal > 0
        ? `wave ${phase.wave}: waiting for its orders to settle, ${notFinal} not final`
        : `wave ${phase.wave}: every order final, waiting for ${toStart} workflows to start and ${stillRunning ?? '?'} to finish`;
    const routePaid = payer.tally.route.PAID ?? 0;
    const routeRefused = Object.values(payer.tally.route).reduce((a, b) => a + b, 0) - routePaid;
    const other = answered - (counts[202] ?? 0) - (counts[409] ?? 0) - (counts[410] ?? 0);
    return (
      `[${((Date.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${doing} | answered ${answered} (` +
      `${['202', '409', '410'].map((status) => `${status}: ${counts[status] ?? 0}`).join(', ')}, other: ${other}) | ` +
      `to start ${toStart} | stored ${stored}: pending ${db.PENDING ?? 0}, paid ${db.PAID ?? 0}, expired ${db.EXPIRED ?? 0}, rejected ${db.REJECTED ?? 0} | ` +
      `route payments ${routePaid} paid, ${routeRefused} refused; signals ${payer.signalled.length}`
    );
  };
}

/** Wave 1, the stampede: every buyer presses at the start (some several times); then its orders settle. */
async function runWave1(run: Run, urls: Urls, sale: Sale, payer: PaymentService, tokens: string[]): Promise<Wave1> {
  const { options } = run;
  const presses: Press[] = [];
  tokens.forEach((token, i) => {
    const press = { token, buyer: `buyer-${sale.runTag}-${i}`, itemId: sale.itemIds[i % sale.itemIds.length] };
    const times = Math.random() < options.impatientShare ? options.impatientPresses : 1;
    for (let k = 0; k < times; k++) presses.push(press);
  });
  shuffle(presses);
  const serverAtStart = await serverCounters(run.config);
  await sleep(Math.max(0, sale.saleStartMs - Date.now()));
  options.print(`sale open: ${presses.length} presses from ${options.buyers} buyers`);
  const startMs = Date.now();
  const machine = machineCpu({ api: run.children[0].process.pid as number, worker: run.children[1].process.pid as number }, run.env);
  const stackCpu = (): StackCpu => ({ atMs: Date.now(), ...machine() });
  const cpuAtStart = stackCpu();
  // Sampled through the stampede, so that its cost up to the last 202 can be read afterwards.
  const samples = [cpuAtStart];
  const sampling = setInterval(() => samples.push(stackCpu()), STAMPEDE_SAMPLE_MS);
  const gate = await saleGateOf(urls.baseUrl, sale.saleId, run.hardStopMs);
  // A buyer's second order is paid by the route, like wave 2's.
  const onAccepted = (orderId: string, deadlineMs: number) => {
    sale.accepted.push(orderId);
    payer.pay(orderId, deadlineMs, false);
  };
  const buyers = new BuyerCancels({ baseUrl: urls.baseUrl, gate, paymentWindowMs: options.paymentWindowMs, hardStopMs: run.hardStopMs, onAccepted });
  const cancels = { buyers, share: options.cancelShare, pressOf: new Map(presses.map((p) => [p.buyer, p])) };
  payer.stampeding = true;
  const results = await pressAll({ baseUrl: urls.baseUrl, presses, gate, concurrency: options.concurrency, rate: options.rate, deadlineMs: run.hardStopMs, onResult: onResult(sale, payer, options.payShare, 0.5, cancels) }).finally(() => {
    clearInterval(sampling);
    payer.stampeding = false;
  });
  samples.push(stackCpu());
  const summary = summarize(results, startMs, Date.now(), sale.saleStartMs, sale.totalUnits);
  const soldOutAtMs = sale.saleStartMs + (summary.msToSoldOut ?? summary.msToLastAccepted ?? 0);
  const atSoldOut = samples.find((c) => c.atMs >= soldOutAtMs) ?? samples[samples.length - 1];
  const accepted = sale.accepted.length;
  options.print(`wave 1 done: ${accepted} accepted; waiting for their workflows, payments and expiries…`);
  sale.phase = { wave: 1, settling: true };
  // The start queue first seen empty: every accepted order's workflow started (polled every 100 ms).
  while ((await queued(sale)) > 0 && Date.now() < run.hardStopMs) await sleep(100);
  const lastStartedMs = Date.now() - sale.saleStartMs;
  await waitAllFinal(run, sale, payer, accepted);
  const msToFinal = Date.now() - sale.saleStartMs;
  const cpuAtFinal = stackCpu();
  const lastPersisted = await run.pool.query<{ ms: number | null }>('SELECT (extract(epoch FROM max(created_at)) * 1000)::float8 AS ms FROM orders WHERE sale_id = $1', [sale.saleId]);
  const lastPersistedMs = lastPersisted.rows[0].ms === null ? null : Math.round(lastPersisted.rows[0].ms - sale.saleStartMs);
  return { summary, results, accepted, lastStartedMs, lastPersistedMs, msToFinal, cpuAtStart, cpuAtFinal, atSoldOut, gate, serverAtStart, cancels: buyers.tally };
}

/**
 * Wave 2: new buyers for the units that came back, all paid through the route (which needs no workflow yet), once
 * the sold-out flags cleared (SOLD_OUT_RECHECK_MS).
 */
async function runWave2(run: Run, urls: Urls, sale: Sale, payer: PaymentService, tokens: string[], gate: string | undefined): Promise<WaveSummary> {
  const { options } = run;
  const unitsBack = [...(await run.store.view.stock(sale.saleId, sale.itemIds)).values()].reduce<number>((n, v) => n + (v ?? 0), 0);
  await sleep(run.config.SOLD_OUT_RECHECK_MS + 200);
  options.print(`wave 2: ${unitsBack} units back in stock, ${options.secondWaveBuyers} new buyers`);
  sale.phase = { wave: 2, settling: false };
  const presses = shuffle(tokens.map((token, i) => ({ token, buyer: `late-${sale.runTag}-${i}`, itemId: sale.itemIds[i % sale.itemIds.length] })));
  const startMs = Date.now();
  const results = await pressAll({ baseUrl: urls.baseUrl, presses, gate, concurrency: options.concurrency, rate: options.rate, deadlineMs: run.hardStopMs, onResult: onResult(sale, payer, 1, 0) });
  const summary = summarize(results, startMs, Date.now(), startMs, unitsBack);
  sale.phase = { wave: 2, settling: true };
  await waitAllFinal(run, sale, payer, sale.accepted.length);
  return summary;
}

/** Keeps the API's, the worker's and the payment service's metrics and every payment attempt beside the report. @returns the worker's metrics */
async function keepExtras(run: Run, urls: Urls, payer: PaymentService): Promise<string> {
  const workerMetrics = await (await fetch(`http://127.0.0.1:${urls.workerMetricsPort}/metrics`)).text();
  writeFileSync(join(run.dir, 'worker-metrics.prom'), workerMetrics);
  writeFileSync(join(run.dir, 'api-metrics.prom'), await (await fetch(`${urls.internalUrl}/metrics`)).text());
  if (urls.paymentsUrl !== urls.internalUrl) writeFileSync(join(run.dir, 'payments-api-metrics.prom'), await (await fetch(`${urls.paymentsUrl}/metrics`)).text());
  writeFileSync(join(run.dir, 'payments.jsonl'), payer.attempts.map((a) => JSON.stringify(a)).join('\n') + '\n');
  return workerMetrics;
}

/** Reads what the sale left, audits it and every order's history, and writes report.json and report.md. */
async function report(run: Run, urls: Urls, sale: Sale, payer: PaymentService, wave1: Wave1, wave2: WaveSummary): Promise<DemoResult> {
  const { options, config, pool, store, temporal } = run;
  payer.tally.signal = await signalFates(pool, payer.signalled);
  const taskMetrics = workerTaskMetrics(await keepExtras(run, urls, payer));
  const serverAtEnd = await serverCounters(config).catch((err: unknown) => `the server's metrics did not answer: ${(err as Error).message}`);
  const settledMs = Date.now();
  options.print(`auditing, and reading ${sale.accepted.length} order histories for workflow task timeouts and failures…`);
  // Both only read: side by side they take about the longer one's time, not the sum.
  const [audit, histories] = await Promise.all([
    auditSale({ pool, store, temporal, kafka: createKafka(config, 'flash-sale-demo-audit'), topic: config.KAFKA_TOPIC }, sale.saleId, sale.accepted),
    scanHistories(temporal, sale.accepted, payer.paidVia),
  ]);
  const bench = latestResult('drain') as { date: string; loadavg1m: unknown; minimal?: { totalCpuMs: number; completedPerS: number }; order?: { totalCpuMs: number } } | undefined;
  const { print, ...plainOptions } = options;
  const { latencies } = payer;
  const result: DemoResult = {
    saleId: sale.saleId,
    options: plainOptions,
    machine: { cores: cpus().length, node: process.version },
    processes: run.processes,
    traceFiles: run.traceFiles,
    temporal: onRealServer(config.TEMPORAL_PORT) ? 'real server (frontend, history, matching, worker on PostgreSQL)' : 'dev server',
    waves: [wave1.summary, wave2],
    msFromStartToLastStarted: wave1.lastStartedMs,
    stagesMs: { setup: sale.saleStartMs - run.startMs, sale: settledMs - sale.saleStartMs, checks: Date.now() - settledMs },
    msFromStartToLastPersisted: wave1.lastPersistedMs,
    cancels: wave1.cancels,
    payments: payer.tally,
    paymentLatencyMs: { route: withMax(latencies.route), routeDuringStampede: withMax(latencies.routeDuringStampede), routeAfterStampede: withMax(latencies.routeAfterStampede), signal: withMax(latencies.signal) },
    drain: {
      orders: wave1.accepted,
      msToAllFinal: wave1.msToFinal,
      ordersPerS: Math.round((wave1.accepted / (wave1.msToFinal / 1000)) * 10) / 10,
      cpuMsPerOrder: perOrder(wave1.cpuAtStart, wave1.cpuAtFinal, wave1.accepted),
      apiCpuMs: Math.round(wave1.cpuAtFinal.api - wave1.cpuAtStart.api),
      ...(bench?.minimal && { baseline: { date: bench.date, loadavg1m: bench.loadavg1m, totalCpuMs: bench.minimal.totalCpuMs, completedPerS: bench.minimal.completedPerS, orderTotalCpuMs: bench.order?.totalCpuMs } }),
    },
    stampede: {
      ms: wave1.atSoldOut.atMs - wave1.cpuAtStart.atMs,
      answered: wave1.results.filter((r) => r.answeredAtMs <= wave1.atSoldOut.atMs).length,
      cpuMs: Object.fromEntries(MACHINE_PARTS.map((k) => [k, Math.round(wave1.atSoldOut[k] - wave1.cpuAtStart[k])])) as Record<(typeof MACHINE_PARTS)[number], number>,
    },
    workflowTasks: { ...taskMetrics, ...histories },
    ...(wave1.serverAtStart && serverAtEnd && { server: typeof serverAtEnd === 'string' ? serverAtEnd : serverFigures(wave1.serverAtStart, serverAtEnd, sale.accepted.length) }),
    finalCounts: { units: sale.totalUnits, ...(await dbCounts(run, sale)) },
    audit,
    reportFiles: [join(run.dir, 'report.json'), join(run.dir, 'report.md')],
  };
  writeFileSync(result.reportFiles[0], JSON.stringify(result, null, 2));
  writeFileSync(result.reportFiles[1], renderMarkdown(result));
  return result;
}
