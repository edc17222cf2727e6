/**
 * The main job: a whole flash sale on the real stack. Creates a sale, starts the API and the worker as
 * processes, lets a crowd of buyers with real signed JWTs press "buy" at the sale's start, pays a share of
 * the accepted orders (half through the payment route, which takes payments from the 202 on, half through
 * the `paid` signal, whose buyer is offered the checkout once the order is stored; every checkout closes at the
 * deadline the 202 showed, so an order stored after it is not paid by signal), lets the rest expire, sends a
 * second wave of new buyers for the units that came back (and pays all of those through the route), then
 * audits every store and writes a report (JSON and Markdown) under reports/. The report also charges wave 1's
 * drain to Temporal, the worker and PostgreSQL (CPU ms per order, from /proc) beside the drain bench's
 * minimal-workflow baseline, and shows the worker's workflow task latencies (Core's metrics), the workflow task
 * timeouts and failures in every order's history, and how long payments took to be answered.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { createSigner } from 'fast-jwt';
import { WorkflowNotFoundError } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import type { Pool } from 'pg';
import { Agent, request } from 'undici';
import { auditSale, formatAudit, type AuditReport } from '../../src/audit';
import { latestResult } from '../shared/benchResults';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createKafka } from '../../src/infra/kafka';
import { MACHINE_PARTS, machineCpu, onRealServer, realServerMetrics, realServerPids, treesCpuMs, type MachineCpu } from '../shared/procCpu';
import { bucketQuantile, countAbove, counter, counterBy, histogram } from '../../test/support/promText';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis } from '../../src/reservation/client';
import { StartQueue } from '../../src/reservation/startQueue';
import { SaleLayouts } from '../../src/reservation/layout';
import { createSale, loadSale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { paymentDeadlineMs, type Order, type OrderInput } from '../../src/order/types';
import { paidSignal } from '../../src/workflows/definitions';
import { CROWD_IP_LIMIT, pressAll, saleGateOf, type Press, type PressResult } from '../../test/support/crowd';
import { freePort, startChild, type Child } from '../../test/support/processes';
import { latencySummary, percentile } from '../../test/support/stats';
import { shardPlacer } from '../../src/reservation/placement';

export interface DemoOptions {
  /** Units per item. */
  quantity: number;
  items: number;
  /** Distinct buyers in the first wave. */
  buyers: number;
  /** Share of buyers who press several times. */
  impatientShare: number;
  impatientPresses: number;
  /** Share of first-wave orders the payment service pays. */
  payShare: number;
  paymentWindowMs: number;
  /** Distinct new buyers in the second wave (all of their orders are paid). */
  secondWaveBuyers: number;
  concurrency: number;
  /** Requests/s; 0 = as fast as possible. */
  rate: number;
  priceMinor: number;
  apiPort: number;
  /**
   * Where the payment service sends its payments: 'own', an API process of its own (the same program, without a
   * starter), or 'shared', the buyers' API.
   */
  paymentsApi: 'own' | 'shared';
  /** Stock shards per item (each on its own master of a Redis Cluster, REDIS_CLUSTER_NODES). */
  stockShards: number;
  taskQueue: string;
  /** Hard cap on the whole run, ms. */
  maxDurationMs: number;
  reportDir: string;
  /** Variables over the process environment for the demo and its processes (the tests give it names of its own). */
  environment: Record<string, string>;
  /** Progress lines go here. */
  print: (line: string) => void;
}

export const DEFAULT_DEMO: Omit<DemoOptions, 'print'> = {
  quantity: 10_000,
  items: 1,
  buyers: 100_000,
  impatientShare: 0.1,
  impatientPresses: 3,
  payShare: 0.7,
  paymentWindowMs: 30_000,
  secondWaveBuyers: 10_000,
  concurrency: 200,
  rate: 0,
  priceMinor: 1999,
  apiPort: 3000,
  paymentsApi: 'own',
  stockShards: 1,
  taskQueue: 'flash-sale-orders',
  maxDurationMs: 45 * 60_000,
  reportDir: 'reports',
  environment: {},
};

export interface WaveSummary {
  requests: number;
  durationMs: number;
  offeredRate: number;
  servedRate: number;
  statusCounts: Record<string, number>;
  latencyAcceptedMs: ReturnType<typeof latencySummary>;
  latencySoldOutMs: ReturnType<typeof latencySummary>;
  accepted: number;
  msToLastAccepted: number | null;
  /**
   * To the 202 that sold the wave's last unit on offer (its units-th): later 202s, if any, resold units that
   * came back meanwhile (an unpaid order's window ended during the wave). Null when they did not all sell.
   */
  msToSoldOut: number | null;
}

export interface DemoResult {
  saleId: number;
  options: Omit<DemoOptions, 'print'>;
  machine: { cores: number; node: string };
  /** The service's processes the demo ran, as `name` or `name (nice N)`. */
  processes: string[];
  /** With OTEL_TRACES_EXPORTER=jsonl, each process' span file (`npm run trace` reads them); else none. */
  traceFiles: string[];
  /** The Temporal the run used (not the demo's to start). */
  temporal: 'dev server' | 'real server (frontend, history, matching, worker on PostgreSQL)';
  waves: WaveSummary[];
  /** Wave 1: sale start → the start queue empty (the last accepted order's workflow started), ±100 ms. */
  msFromStartToLastStarted: number;
  msFromStartToLastPersisted: number | null;
  /**
   * The run's stages, ms: setup (processes, tokens, warm-up) until the sale opens; the sale, until every order of
   * both waves is final and its workflow ended; the checks (audit and history scan) after it.
   */
  stagesMs: { setup: number; sale: number; checks: number };
  payments: PaymentTally;
  /**
   * Per attempt, from request to answer: the payment route (any status), also split by when the attempt was sent
   * (during wave 1's presses, or after them, while the drain's backlog is stored), and the `paid` signal.
   */
  paymentLatencyMs: { route: LatencyWithMax; routeDuringStampede: LatencyWithMax; routeAfterStampede: LatencyWithMax; signal: LatencyWithMax };
  /**
   * Wave 1 from its first press to the CPU sample just after its sold-out 202 (msToSoldOut; samples every STAMPEDE_SAMPLE_MS):
   * the presses answered by then, and the CPU ms each part of the machine spent meanwhile. `crowd` is the demo
   * process itself (load generator and payment service).
   */
  stampede: { ms: number; answered: number; cpuMs: Record<(typeof MACHINE_PARTS)[number], number> };
  drain: DrainFigures;
  workflowTasks: WorkflowTaskFigures;
  /** Per accepted order, on the real server only; or why it could not be read. */
  server?: ServerFigures | string;
  finalCounts: Record<string, number>;
  audit: AuditReport;
  reportFiles: string[];
}

/** The live line's columns, printed once before it. */
const LEGEND = [
  'Live line, once a second:',
  '  phase      | what the run waits for, and how many orders or workflows are left',
  '  answered   | presses answered so far, by HTTP status (202 accepted, 409 already holds an order, 410 sold out)',
  '  to start   | accepted orders whose workflow the starter has yet to start (the sale\'s start queue in Redis)',
  '  stored     | orders in PostgreSQL: pending (in their payment window), paid, expired (unit back in stock), rejected',
  '  payments   | the payment service so far: the route\'s answers, and signals sent (their outcome is read at the end)',
].join('\n');

/** The demo's payment service, by path and by what became of each payment. */
export interface PaymentTally {
  /** The payment route's definitive answers by code: PAID, PAYMENT_WINDOW_CLOSED (late), or another refusal. */
  route: Record<string, number>;
  /**
   * Signals delivered (or sent to a workflow that had ended), by what the workflow made of them: paid, or
   * refused because the workflow handled them after the deadline (sent just before it, or queued behind a backlog).
   */
  signal: { paid: number; handledAfterDeadline: number };
  /**
   * Buyers who came to pay after the checkout had closed at their order's deadline (nothing taken, nothing sent),
   * by the path they would have paid through: a signal's checkout opens only once the order is stored.
   */
  checkoutClosed: { route: number; signal: number };
  retried: number;
  failed: number;
  unavailable: number;
  unavailableWithRetryAfter: number;
}

function newPaymentTally(): PaymentTally {
  return { route: {}, signal: { paid: 0, handledAfterDeadline: 0 }, checkoutClosed: { route: 0, signal: 0 }, retried: 0, failed: 0, unavailable: 0, unavailableWithRetryAfter: 0 };
}

/**
 * What became of the signalled payments (their paymentId is `pay-<orderId>`), from the orders' final rows: a row
 * made at or after its deadline was stored by a workflow that first ran after it.
 */
async function signalFates(pool: Pool, orderIds: readonly string[]): Promise<PaymentTally['signal']> {
  const res = await pool.query<PaymentTally['signal']>(
    `SELECT count(*) FILTER (WHERE paid)::int AS paid,
            count(*) FILTER (WHERE NOT paid)::int AS "handledAfterDeadline"
       FROM (SELECT created_at, deadline_at, status = 'PAID' AND payment_id = 'pay-' || id::text AS paid
               FROM orders WHERE id = ANY($1::uuid[])) o`,
    [orderIds],
  );
  return res.rows[0];
}

export type LatencyWithMax = ReturnType<typeof latencySummary> & { max: number };

/** Wave 1's drain: its orders from the sale's start until all were final, and what they cost. */
export interface DrainFigures {
  orders: number;
  msToAllFinal: number;
  /** Final orders per second over msToAllFinal. */
  ordersPerS: number;
  /** CPU ms per wave-1 order over that time (/proc), wave-1 payments included. */
  cpuMsPerOrder: { temporal: number; worker: number; postgres: number; total: number };
  /** The API process over that time, ms: the whole stampede, the starter and the payment route. */
  apiCpuMs: number;
  /** The drain bench's latest minimal workflow (start → one activity → complete) on this machine, if it ran. */
  baseline?: { date: string; loadavg1m: unknown; totalCpuMs: number; completedPerS: number; orderTotalCpuMs?: number };
}

/** The worker's workflow tasks over the whole run (Core's metrics) and what every order's history holds. */
export interface WorkflowTaskFigures {
  executed: number;
  /** Upper bounds of the histogram buckets that hold p50 and p99, ms. */
  executionMs: { p50: number; p99: number };
  /**
   * Tasks whose execution took longer than `bound` ms: the largest bucket bound up to 5 s, the worker's
   * warning (TMPRL1104) threshold, so a count here may include tasks that stayed under it.
   */
  slowExecutions: { bound: number; count: number };
  scheduleToStartMs: { p50: number; p99: number };
  executionFailed: number;
  stickyCacheMisses: number;
  historiesScanned: number;
  /**
   * For the EXPIRED orders, how long after its deadline each unit was back in stock (ms; to the workflow task
   * that released it, as the history stamps its completion), in two groups: orders whose workflow first ran
   * before the deadline (their timer aimed at it) and those whose workflow first ran after it (its start waited
   * in the start queue longer than the payment window).
   */
  returnLagMs: { startedBeforeDeadline: LagSummary; firstRanAfterDeadline: LagSummary };
  /** WorkflowTaskTimedOut events across those histories. */
  timedOutInHistory: number;
  /**
   * WorkflowTaskFailed events by cause. UNHANDLED_COMMAND is Temporal refusing a completion because a signal
   * arrived meanwhile (the worker runs the task again with it), not a fault.
   */
  failedInHistory: Record<string, number>;
  /**
   * The UNHANDLED_COMMAND failures by the order's payment path (signal, route, unpaid) and whether its workflow
   * first ran before or after the deadline: where the wasted workflow tasks come from.
   */
  unhandledCommandBy: Record<string, number>;
  /**
   * Mean history events, workflow tasks (WorkflowTaskScheduled) and state transitions (the server's count for the
   * execution, from DescribeWorkflowExecution) per order.
   */
  perOrder: { events: number; workflowTasks: number; stateTransitions: number };
}

/**
 * What the real Temporal server counted from wave 1's start until both waves settled, per accepted order, from
 * its Prometheus endpoints and /proc. Absent on the dev server, which exports none of them.
 */
export interface ServerFigures {
  /** Actions (what Temporal Cloud bills and rate-limits) in the run's namespace. */
  actions: number;
  /** Those by the server's `action_type` label (e.g. grpc_StartWorkflowExecution, command_BatchMarkers). */
  actionsByType: Record<string, number>;
  /** Persistence requests of every namespace, the server's own background work included. */
  persistenceRequests: number;
  /** CPU ms of each of the server's services (its processes), background work included. */
  cpuMsByService: Record<string, number>;
}

/** A reading of the real server's counters so far, and the processes they were read from. */
interface ServerReading extends ServerFigures {
  pids: Record<string, number>;
}

/**
 * @returns the real server's counters so far, summed over its services; undefined when the run is on the dev server
 * @throws when a service's metrics endpoint does not answer
 */
async function serverCounters(config: Config): Promise<ServerReading | undefined> {
  if (!onRealServer(config.TEMPORAL_PORT)) return undefined;
  const texts = await Promise.all(realServerMetrics().map(async (url) => (await fetch(url)).text()));
  // The server's metrics name the namespace with Prometheus' characters only.
  const namespace = config.TEMPORAL_NAMESPACE.replace(/[^a-zA-Z0-9_]/g, '_');
  const actionsByType: Record<string, number> = {};
  for (const [type, n] of texts.flatMap((t) => Object.entries(counterBy(t, 'action', 'action_type', { namespace })))) actionsByType[type] = (actionsByType[type] ?? 0) + n;
  const pids = realServerPids();
  return {
    actions: Object.values(actionsByType).reduce((a, b) => a + b, 0),
    actionsByType,
    persistenceRequests: texts.reduce((n, t) => n + counter(t, 'persistence_requests'), 0),
    cpuMsByService: treesCpuMs(pids),
    pids,
  };
}

/**
 * @returns the server's figures per accepted order between two readings, or why there are none: a service that
 *   restarted in between started its counters again
 */
function serverFigures(start: ServerReading, end: ServerReading, orders: number): ServerFigures | string {
  const restarted = Object.keys(start.pids).filter((service) => start.pids[service] !== end.pids[service]);
  if (restarted.length) return `the server's ${restarted.join(', ')} restarted during the run: its counters started again`;
  const per = (n: number) => Math.round((n / Math.max(1, orders)) * 100) / 100;
  const perKey = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.entries(b).map(([k, v]) => [k, per(v - (a[k] ?? 0))]).filter(([, v]) => v !== 0));
  return {
    actions: per(end.actions - start.actions),
    actionsByType: perKey(start.actionsByType, end.actionsByType),
    persistenceRequests: per(end.persistenceRequests - start.persistenceRequests),
    cpuMsByService: perKey(start.cpuMsByService, end.cpuMsByService),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STAMPEDE_SAMPLE_MS = 250;
type StackCpu = MachineCpu & { atMs: number };
const { WorkflowTaskFailedCause } = proto.api.enums.v1;

const withMax = (values: number[]): LatencyWithMax => ({ ...latencySummary(values), max: Math.round(values.reduce((m, v) => Math.max(m, v), 0)) });

/** @returns per-order CPU ms of Temporal, the worker and PostgreSQL between two snapshots of the machine's CPU */
function perOrder(before: StackCpu, after: StackCpu, orders: number) {
  type Part = (typeof MACHINE_PARTS)[number];
  const per = (k: Part) => Math.round(((after[k] - before[k]) / Math.max(1, orders)) * 100) / 100;
  const temporal = per('temporal');
  const worker = per('worker');
  const postgres = per('postgres');
  return { temporal, worker, postgres, total: Math.round((temporal + worker + postgres) * 100) / 100 };
}

/** The worker's Core metrics: workflow task latencies, failures and sticky cache misses. */
function workerTaskMetrics(text: string): Omit<WorkflowTaskFigures, 'historiesScanned' | 'timedOutInHistory' | 'failedInHistory' | 'unhandledCommandBy' | 'perOrder' | 'returnLagMs'> {
  const execution = histogram(text, 'temporal_workflow_task_execution_latency');
  const toStart = histogram(text, 'temporal_workflow_task_schedule_to_start_latency');
  return {
    executed: execution.count,
    executionMs: { p50: bucketQuantile(execution, 0.5), p99: bucketQuantile(execution, 0.99) },
    slowExecutions: countAbove(execution, 5000),
    scheduleToStartMs: { p50: bucketQuantile(toStart, 0.5), p99: bucketQuantile(toStart, 0.99) },
    executionFailed: counter(text, 'temporal_workflow_task_execution_failed'),
    stickyCacheMisses: counter(text, 'temporal_sticky_cache_miss'),
  };
}

/** Histories read at once: many reads in flight keep the dev server busy rather than waiting on each round trip. */
const HISTORY_READS_IN_FLIGHT = 64;

export interface LagSummary {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

function lagSummary(values: number[]): LagSummary {
  const sorted = [...values].sort((a, b) => a - b);
  return { count: sorted.length, p50: Math.round(percentile(sorted, 50)), p99: Math.round(percentile(sorted, 99)), max: Math.round(sorted[sorted.length - 1] ?? Number.NaN) };
}

type HistoryEvent = NonNullable<Awaited<ReturnType<ReturnType<Awaited<ReturnType<typeof connectTemporal>>['workflow']['getHandle']>['fetchHistory']>>['events']>[number];

const eventMs = (e: HistoryEvent) => Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6);
const payloadJson = (payload: { data?: Uint8Array | null } | undefined) => JSON.parse(Buffer.from(payload?.data ?? []).toString('utf8')) as unknown;

/**
 * Reads every order's history (HISTORY_READS_IN_FLIGHT at a time): its workflow task timeouts, its failures by
 * cause, and for an EXPIRED order how long after its deadline its unit came back (returnLagMs).
 */
async function scanHistories(temporal: Awaited<ReturnType<typeof connectTemporal>>, orderIds: readonly string[], paidVia: ReadonlyMap<string, 'route' | 'signal'>) {
  let timedOut = 0;
  let events = 0;
  let workflowTasks = 0;
  let stateTransitions = 0;
  const failedByCause: Record<string, number> = {};
  const unhandledCommandBy: Record<string, number> = {};
  const lags = { startedBeforeDeadline: [] as number[], firstRanAfterDeadline: [] as number[] };
  let next = 0;
  await Promise.all(
    Array.from({ length: HISTORY_READS_IN_FLIGHT }, async () => {
      while (next < orderIds.length) {
        const orderId = orderIds[next++];
        const handle = temporal.workflow.getHandle(orderId);
        const [fetched, described] = await Promise.all([handle.fetchHistory(), handle.describe()]);
        const history = fetched.events ?? [];
        stateTransitions += Number(described.raw.workflowExecutionInfo?.stateTransitionCount?.toString() ?? 0);
        const input = payloadJson(history[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]) as OrderInput;
        const deadlineMs = paymentDeadlineMs(input);
        const firstTask = history.find((e) => e.workflowTaskStartedEventAttributes);
        const ranAfterDeadline = firstTask !== undefined && eventMs(firstTask) >= deadlineMs;
        events += history.length;
        for (const e of history) {
          if (e.workflowTaskScheduledEventAttributes) workflowTasks += 1;
          if (e.workflowTaskTimedOutEventAttributes) timedOut += 1;
          const failed = e.workflowTaskFailedEventAttributes;
          if (failed) {
            const cause = (WorkflowTaskFailedCause[failed.cause ?? 0] ?? String(failed.cause)).replace('WORKFLOW_TASK_FAILED_CAUSE_', '');
            failedByCause[cause] = (failedByCause[cause] ?? 0) + 1;
            if (cause === 'UNHANDLED_COMMAND') {
              const key = `${paidVia.get(orderId) ?? 'unpaid'}, first ran ${ranAfterDeadline ? 'after' : 'before'} the deadline`;
              unhandledCommandBy[key] = (unhandledCommandBy[key] ?? 0) + 1;
            }
          }
        }
        const completed = history.find((e) => e.workflowExecutionCompletedEventAttributes);
        const result = completed && (payloadJson(completed.workflowExecutionCompletedEventAttributes?.result?.payloads?.[0]) as Order);
        if (result?.status !== 'EXPIRED' || !firstTask) continue;
        // The unit goes back in the task that settles the order, the last before the workflow completes.
        const settledIn = [...history].reverse().find((e) => e.workflowTaskCompletedEventAttributes) ?? (completed as HistoryEvent);
        (eventMs(firstTask) < deadlineMs ? lags.startedBeforeDeadline : lags.firstRanAfterDeadline).push(eventMs(settledIn) - deadlineMs);
      }
    }),
  );
  return {
    historiesScanned: orderIds.length,
    timedOutInHistory: timedOut,
    failedInHistory: failedByCause,
    unhandledCommandBy,
    perOrder: {
      events: Math.round((events / Math.max(1, orderIds.length)) * 10) / 10,
      workflowTasks: Math.round((workflowTasks / Math.max(1, orderIds.length)) * 100) / 100,
      stateTransitions: Math.round((stateTransitions / Math.max(1, orderIds.length)) * 10) / 10,
    },
    returnLagMs: { startedBeforeDeadline: lagSummary(lags.startedBeforeDeadline), firstRanAfterDeadline: lagSummary(lags.firstRanAfterDeadline) },
  };
}

const SALE_OPENS_IN_MS = 4000;
/** Connections the demo's payment service keeps to the API (its client's pool; payments beyond them queue there). */
const PAYMENT_CONNECTIONS = 128;
const WARMUP_PRESSES = 5000;

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

function summarize(results: readonly PressResult[], startMs: number, endMs: number, saleStartMs: number, units: number): WaveSummary {
  const statusCounts: Record<string, number> = {};
  for (const r of results) statusCounts[r.status || 'network error'] = (statusCounts[r.status || 'network error'] ?? 0) + 1;
  const accepted = results.filter((r) => r.status === 202);
  const durationMs = Math.max(1, endMs - startMs);
  const lastAnswer = results.reduce((m, r) => Math.max(m, r.answeredAtMs), startMs);
  const acceptedAt = accepted.map((r) => r.answeredAtMs).sort((a, b) => a - b);
  return {
    requests: results.length,
    durationMs,
    offeredRate: Math.round((results.length / durationMs) * 1000),
    servedRate: Math.round((results.filter((r) => r.status > 0).length / Math.max(1, lastAnswer - startMs)) * 1000),
    statusCounts,
    latencyAcceptedMs: latencySummary(accepted.map((r) => r.latencyMs)),
    latencySoldOutMs: latencySummary(results.filter((r) => r.status === 410).map((r) => r.latencyMs)),
    accepted: accepted.length,
    msToLastAccepted: acceptedAt.length ? acceptedAt[acceptedAt.length - 1] - saleStartMs : null,
    msToSoldOut: units > 0 && acceptedAt.length >= units ? acceptedAt[units - 1] - saleStartMs : null,
  };
}

/** Runs the whole sale. @throws when the stack is not up or a process does not start */
export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const { print, ...plainOptions } = options;
  const runStartMs = Date.now();
  const runId = new Date().toISOString().replace(/[:.]/g, '-');
  const dir = join(options.reportDir, `demo-${runId}`);
  mkdirSync(dir, { recursive: true });
  // The whole crowd comes from loopback: one client IP. Its limit is lifted; each buyer's stays as configured.
  // The starter runs in a process of its own unless STARTER_IN_API says otherwise: on one machine it is part of
  // the drain, which yields the CPU to the API (docs/performance.md, the payment route under a burst).
  const env = { STARTER_IN_API: 'false', ...process.env, ...options.environment, API_PORT: String(options.apiPort), TEMPORAL_TASK_QUEUE: options.taskQueue, LOG_LEVEL: 'info', RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT) };
  const config = loadConfig(env);
  const hardStopMs = Date.now() + options.maxDurationMs;
  // With spans as JSON lines, one file per process beside the logs.
  const traceFiles: string[] = [];
  const traced = (name: string) => {
    if (config.OTEL_TRACES_EXPORTER !== 'jsonl') return env;
    traceFiles.push(join(dir, `${name}.spans.jsonl`));
    return { ...env, OTEL_TRACES_FILE: traceFiles[traceFiles.length - 1] };
  };

  const pool = createPool(config);
  const redis = createRedis(config);
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  const temporal = await connectTemporal(config);
  const children: Child[] = [];
  const processes: string[] = [];
  const payments = newPaymentTally();
  // Orders paid through the signal: what became of the payment is the workflow's to decide, read at the end.
  const signalled: string[] = [];
  const paidVia = new Map<string, 'route' | 'signal'>();
  // The payment service's HTTP client, as a service keeps one: keep-alive connections, at most PAYMENT_CONNECTIONS,
  // rather than one new connection per payment in flight (a burst of those overflowed the API's accept queue).
  const paymentService = new Agent({ connections: PAYMENT_CONNECTIONS, keepAliveTimeout: 60_000 });
  const latencies = { route: [] as number[], routeDuringStampede: [] as number[], routeAfterStampede: [] as number[], signal: [] as number[] };
  // Every payment attempt as the payment service saw it, kept beside the report (payments.jsonl): its send time
  // lines it up with the API's log and metrics when a latency needs explaining.
  const attempts: { orderId: string; path: 'route' | 'signal'; sentAtMs: number; ms: number; status: number }[] = [];
  // Wave 1's presses are still being sent: a payment's latency is counted in the stampede's share.
  let stampeding = false;
  const inFlightPayments: Promise<void>[] = [];
  let progress: NodeJS.Timeout | undefined;
  let stopRowWatch = () => undefined as void;
  let stopping = false;

  try {
    print(`signing ${options.buyers + options.secondWaveBuyers} buyer tokens…`);
    const runTag = randomUUID().slice(0, 8);
    const wave1Tokens = signTokens(config, `buyer-${runTag}-`, options.buyers);
    const wave2Tokens = signTokens(config, `late-${runTag}-`, options.secondWaveBuyers);

    print('starting the API and the worker…');
    // Its internal door (/metrics, and the payments when they share this API) on a port found free.
    const internalPort = await freePort();
    children.push(startChild('api', 'dist/api/main.js', { ...traced('api'), INTERNAL_API_PORT: String(internalPort) }, join(dir, 'api.log'), 'api listening'));
    processes.push(config.STARTER_IN_API ? 'api (with its starter)' : 'api', 'worker (nice 10)', ...(config.STARTER_IN_API ? [] : ['starter (nice 10)']));
    // The worker's work is the drain, at Temporal's pace: it yields the CPU to the API while the stampede lasts.
    const workerMetricsPort = await freePort();
    children.push(startChild('worker', 'dist/worker/main.js', { ...traced('worker'), WORKER_METRICS_PORT: String(workerMetricsPort) }, join(dir, 'worker.log'), 'worker running', { nice: 10 }));
    // STARTER_IN_API=false (the demo's default): a starter process of its own (docs/deploy.md), niced like the worker.
    if (!config.STARTER_IN_API) children.push(startChild('starter', 'dist/starter/main.js', traced('starter'), join(dir, 'starter.log'), 'starter running', { nice: 10 }));
    // The payment service's own API process: a stampede on the buyers' API does not queue its payments behind
    // the presses in one event loop (docs/deploy.md). Payments go to the internal door of that process, or of
    // the buyers' API when they share it.
    const paymentsPort = options.paymentsApi === 'own' ? await freePort() : internalPort;
    if (options.paymentsApi === 'own') {
      const paymentsEnv = { ...traced('payments-api'), API_PORT: String(await freePort()), INTERNAL_API_PORT: String(paymentsPort), STARTER_IN_API: 'false' };
      children.push(startChild('payments-api', 'dist/api/main.js', paymentsEnv, join(dir, 'payments-api.log'), 'api listening'));
      processes.push("the payment service's api");
    }
    await Promise.all(children.map((c) => c.ready));
    const baseUrl = `http://${config.API_HOST}:${options.apiPort}`;
    const internalUrl = `http://${config.INTERNAL_API_HOST}:${internalPort}`;
    const paymentsUrl = `http://${config.INTERNAL_API_HOST}:${paymentsPort}`;

    const saleStartMs = Date.now() + SALE_OPENS_IN_MS;
    const sale = await createSale(pool, {
      name: `demo ${runId}`,
      startsAt: new Date(saleStartMs).toISOString(),
      endsAt: new Date(saleStartMs + options.maxDurationMs).toISOString(),
      paymentWindowMs: options.paymentWindowMs,
      items: Array.from({ length: options.items }, (_, i) => ({
        productId: `item-${i + 1}`,
        quantity: options.quantity,
        priceMinor: options.priceMinor,
        currency: 'EUR',
        stockShards: options.stockShards,
      })),
    }, shardPlacer(store.redis));
    await loadSale(pool, store, sale.saleId, false);
    const itemIds = sale.items.map((i) => i.itemId);
    const totalUnits = options.quantity * options.items;
    print(`sale ${sale.saleId}: ${options.items} item(s) × ${options.quantity} units, payment window ${options.paymentWindowMs} ms, opens in ${SALE_OPENS_IN_MS / 1000} s`);
    // The API was started a moment ago, where a real one has served traffic for a while: warm it (JIT, connections,
    // token checks) with presses from other buyers before the sale opens, each refused 403 SALE_NOT_ACTIVE, which
    // changes nothing (I7).
    const warmup = signTokens(config, `warmup-${runTag}-`, WARMUP_PRESSES).map((token, i) => ({ token, buyer: `warmup-${i}`, itemId: sale.items[0].itemId }));
    const warmed = await pressAll({ baseUrl, presses: warmup, concurrency: options.concurrency, rate: 0, deadlineMs: saleStartMs - 200 });
    print(`API warmed: ${warmed.filter((r) => r.status === 403).length} presses before the start refused 403`);

    const accepted: string[] = [];
    const counts: Record<string, number> = {};
    // Orders whose payment goes by signal wait for their row: the payment service hears of an order from its
    // OrderPlaced, once the workflow has stored it (a signal needs the workflow; the route needs nothing).
    const awaitingRow = new Map<string, () => void>();
    const rowWatch = setInterval(() => {
      if (!awaitingRow.size) return;
      void pool.query<{ id: string }>('SELECT id FROM orders WHERE id = ANY($1::uuid[])', [[...awaitingRow.keys()]]).then(
        (res) => {
          for (const { id } of res.rows) {
            awaitingRow.get(id)?.();
            awaitingRow.delete(id);
          }
        },
        () => undefined,
      );
    }, 500);
    stopRowWatch = () => {
      clearInterval(rowWatch);
      for (const resolve of awaitingRow.values()) resolve();
      awaitingRow.clear();
    };
    const stored = (orderId: string) => new Promise<void>((resolve) => awaitingRow.set(orderId, resolve));
    /** @param deadlineMs the order's payment deadline as its 202 showed it (ms since the epoch) */
    const pay = (orderId: string, deadlineMs: number, viaSignal: boolean) => {
      const paymentId = `pay-${orderId}`;
      // A buyer takes a couple of seconds or more to pay, and may take up to half of the window.
      const delay = randomInt(2000, Math.max(2001, Math.floor(options.paymentWindowMs / 2)));
      // Like a real payment service: retry a 5xx or a network error (same paymentId, so it stays
      // idempotent) until a definitive answer — 200, or a 409/422 that means "refund". A signal to a workflow
      // that has ended is refused too: the order settled without this payment.
      /** @returns 'retry', or the definitive answer: the route's error code ('PAID' on 200), or 'SIGNALLED' */
      const attempt = async (): Promise<string> => {
        const t0 = performance.now();
        const sentAtMs = Date.now();
        const during = stampeding;
        const took = (status = 0) => {
          const ms = performance.now() - t0;
          attempts.push({ orderId, path: viaSignal ? 'signal' : 'route', sentAtMs, ms: Math.round(ms * 10) / 10, status });
          latencies[viaSignal ? 'signal' : 'route'].push(ms);
          if (!viaSignal) latencies[during ? 'routeDuringStampede' : 'routeAfterStampede'].push(ms);
        };
        try {
          if (viaSignal) {
            await temporal.workflow.getHandle(orderId).signal(paidSignal, { paymentId, amount: options.priceMinor });
            took();
            return 'SIGNALLED';
          }
          const res = await request(`${paymentsUrl}/api/flash-sales/orders/${orderId}/payment`, {
            dispatcher: paymentService,
            method: 'POST',
            headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
            body: JSON.stringify({ paymentId, amount: options.priceMinor }),
          });
          const body = (await res.body.json().catch(() => ({}))) as { error?: string };
          took(res.statusCode);
          if (res.statusCode === 503) {
            payments.unavailable += 1;
            if (res.headers['retry-after'] !== undefined) payments.unavailableWithRetryAfter += 1;
          }
          if (res.statusCode === 200) return 'PAID';
          return res.statusCode >= 500 ? 'retry' : (body.error ?? `HTTP_${res.statusCode}`);
        } catch (err) {
          took();
          // The workflow has ended: the order settled without this payment (read at the end, like any signal).
          return err instanceof WorkflowNotFoundError ? 'SIGNALLED' : 'retry';
        }
      };
      inFlightPayments.push(
        // A signal's checkout opens once the order is stored (the demo sees its row), and the buyer then takes a
        // think time: a signal sent on the row's first sight would land in the very workflow task that stored it,
        // and a task that also settles the order (a workflow first run after its deadline) is refused
        // UNHANDLED_COMMAND.
        (viaSignal ? stored(orderId).then(() => sleep(delay)) : sleep(delay)).then(async () => {
          // The checkout closes at the deadline: a buyer back later is not charged, so there is nothing to report.
          if (Date.now() >= deadlineMs) {
            payments.checkoutClosed[viaSignal ? 'signal' : 'route'] += 1;
            return;
          }
          paidVia.set(orderId, viaSignal ? 'signal' : 'route');
          for (let tries = 1; Date.now() < hardStopMs && !stopping; tries++) {
            const outcome = await attempt();
            if (outcome === 'SIGNALLED') {
              signalled.push(orderId);
              return;
            }
            if (outcome !== 'retry') {
              payments.route[outcome] = (payments.route[outcome] ?? 0) + 1;
              return;
            }
            payments.retried += 1;
            await sleep(Math.min(5000, 250 * tries));
          }
          payments.failed += 1;
        }),
      );
    };
    /** @param signalShare of the paid orders, the share paid by the `paid` signal once stored (the rest by the route) */
    const onResult = (payShare: number, signalShare: number) => (r: PressResult) => {
      counts[r.status] = (counts[r.status] ?? 0) + 1;
      if (r.status === 202 && r.orderId) {
        accepted.push(r.orderId);
        if (r.paymentDeadlineMs === undefined) throw new Error(`202 for order ${r.orderId} without a paymentDeadline`);
        if (Math.random() < payShare) pay(r.orderId, r.paymentDeadlineMs, Math.random() < signalShare);
      }
    };
    const dbCounts = async () => {
      const res = await pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [sale.saleId]);
      return Object.fromEntries(res.rows.map((r) => [r.status, r.n])) as Record<string, number>;
    };
    // Accepted orders whose workflow is not started yet (their start queue entries).
    const startQueue = new StartQueue(redis, store.layouts);
    const queued = async () => (await startQueue.depth(sale.saleId, Date.now())).waiting;
    /** @returns when the start queue was first seen empty (every accepted order's workflow started), polled every 100 ms */
    const lastStarted = async () => {
      while ((await queued()) > 0 && Date.now() < hardStopMs) await sleep(100);
      return Date.now();
    };
    const t0 = Date.now();
    // What the run waits for, named on the live line; a settling wave also counts what is left.
    let phase: { wave: 1 | 2; settling: boolean } = { wave: 1, settling: false };
    print(LEGEND);
    // One tick at a time: a slow tick's older counts must not print after a newer one's.
    let ticking = false;
    progress = setInterval(() => {
      if (ticking) return;
      ticking = true;
      const running = phase.settling ? temporal.workflow.count(`SaleId = ${sale.saleId} AND ExecutionStatus = "Running"`).then((c) => c.count, () => undefined) : undefined;
      void Promise.all([dbCounts(), queued(), running]).then(([db, toStart, stillRunning]) => {
        const answered = Object.values(counts).reduce((a, b) => a + b, 0);
        const stored = Object.values(db).reduce((a, b) => a + b, 0);
        const notFinal = accepted.length - (db.PAID ?? 0) - (db.EXPIRED ?? 0) - (db.REJECTED ?? 0);
        const doing = !phase.settling
          ? `wave ${phase.wave}: buyers pressing`
          : notFinal > 0
            ? `wave ${phase.wave}: waiting for its orders to settle, ${notFinal} not final`
            : `wave ${phase.wave}: every order final, waiting for ${toStart} workflows to start and ${stillRunning ?? '?'} to finish`;
        const routePaid = payments.route.PAID ?? 0;
        const routeRefused = Object.values(payments.route).reduce((a, b) => a + b, 0) - routePaid;
        print(
          `[${((Date.now() - t0) / 1000).toFixed(0).padStart(4)}s] ${doing} | answered ${answered} (` +
            `${['202', '409', '410'].map((status) => `${status}: ${counts[status] ?? 0}`).join(', ')}, other: ${answered - (counts[202] ?? 0) - (counts[409] ?? 0) - (counts[410] ?? 0)}) | ` +
            `to start ${toStart} | stored ${stored}: pending ${db.PENDING ?? 0}, paid ${db.PAID ?? 0}, expired ${db.EXPIRED ?? 0}, rejected ${db.REJECTED ?? 0} | ` +
            `route payments ${routePaid} paid, ${routeRefused} refused; signals ${signalled.length}`,
        );
      })
        .catch(() => undefined) // a store that did not answer this second: the next tick prints
        .finally(() => (ticking = false));
    }, 1000);

    const waitAllFinal = async (expected: number) => {
      while (Date.now() < hardStopMs) {
        await Promise.all(inFlightPayments);
        const db = await dbCounts();
        const rows = Object.values(db).reduce((a, b) => a + b, 0);
        // PostgreSQL turns final a moment before the workflow publishes its last event and completes, and the
        // payment route stores (and settles) orders whose workflow is still in the start queue.
        if (rows >= expected && !db.PENDING && (await queued()) === 0) {
          const running = await temporal.workflow.count(`SaleId = ${sale.saleId} AND ExecutionStatus = "Running"`);
          if (running.count === 0) return;
        }
        await sleep(500);
      }
      throw new Error('orders did not all reach a final state before maxDurationMs');
    };

    // Wave 1: the stampede.
    const presses: Press[] = [];
    wave1Tokens.forEach((token, i) => {
      const press = { token, buyer: `buyer-${runTag}-${i}`, itemId: itemIds[i % itemIds.length] };
      const times = Math.random() < options.impatientShare ? options.impatientPresses : 1;
      for (let k = 0; k < times; k++) presses.push(press);
    });
    shuffle(presses);
    const serverAtStart = await serverCounters(config);
    await sleep(Math.max(0, saleStartMs - Date.now()));
    print(`sale open: ${presses.length} presses from ${options.buyers} buyers`);
    const wave1Start = Date.now();
    const machine = machineCpu({ api: children[0].process.pid as number, worker: children[1].process.pid as number });
    const stackCpu = (): StackCpu => ({ atMs: Date.now(), ...machine() });
    const cpuAtStart = stackCpu();
    // Sampled through the stampede, so that its cost up to the last 202 can be read afterwards.
    const stampedeSamples = [cpuAtStart];
    const sampling = setInterval(() => stampedeSamples.push(stackCpu()), STAMPEDE_SAMPLE_MS);
    const gate = await saleGateOf(baseUrl, sale.saleId, hardStopMs);
    stampeding = true;
    const wave1 = await pressAll({ baseUrl, presses, gate, concurrency: options.concurrency, rate: options.rate, deadlineMs: hardStopMs, onResult: onResult(options.payShare, 0.5) }).finally(() => {
      clearInterval(sampling);
      stampeding = false;
    });
    stampedeSamples.push(stackCpu());
    const wave1Summary = summarize(wave1, wave1Start, Date.now(), saleStartMs, totalUnits);
    const soldOutAtMs = saleStartMs + (wave1Summary.msToSoldOut ?? wave1Summary.msToLastAccepted ?? 0);
    const atSoldOut = stampedeSamples.find((c) => c.atMs >= soldOutAtMs) ?? stampedeSamples[stampedeSamples.length - 1];
    const wave1Accepted = accepted.length;
    print(`wave 1 done: ${wave1Accepted} accepted; waiting for their workflows, payments and expiries…`);
    phase = { wave: 1, settling: true };
    const wave1LastStartedMs = (await lastStarted()) - saleStartMs;
    await waitAllFinal(wave1Accepted);
    const msToWave1Final = Date.now() - saleStartMs;
    const cpuAtWave1Final = stackCpu();
    const lastPersisted = await pool.query<{ ms: number | null }>(
      'SELECT (extract(epoch FROM max(created_at)) * 1000)::float8 AS ms FROM orders WHERE sale_id = $1',
      [sale.saleId],
    );
    const back = (await store.stock(sale.saleId, itemIds)).values();
    const unitsBack = [...back].reduce<number>((n, v) => n + (v ?? 0), 0);

    // Wave 2: new buyers for the units that came back, all paid through the route (which needs no workflow yet);
    // the sold-out flags clear within SOLD_OUT_RECHECK_MS.
    await sleep(config.SOLD_OUT_RECHECK_MS + 200);
    print(`wave 2: ${unitsBack} units back in stock, ${options.secondWaveBuyers} new buyers`);
    phase = { wave: 2, settling: false };
    const wave2Presses = shuffle(wave2Tokens.map((token, i) => ({ token, buyer: `late-${runTag}-${i}`, itemId: itemIds[i % itemIds.length] })));
    const wave2Start = Date.now();
    const wave2 = await pressAll({ baseUrl, presses: wave2Presses, gate, concurrency: options.concurrency, rate: options.rate, deadlineMs: hardStopMs, onResult: onResult(1, 0) });
    const wave2Summary = summarize(wave2, wave2Start, Date.now(), wave2Start, unitsBack);
    phase = { wave: 2, settling: true };
    await waitAllFinal(accepted.length);
    clearInterval(progress);
    payments.signal = await signalFates(pool, signalled);
    // Kept beside the report: the worker's Core metrics and the API's, for what the report does not summarize.
    const workerMetrics = await (await fetch(`http://127.0.0.1:${workerMetricsPort}/metrics`)).text();
    writeFileSync(join(dir, 'worker-metrics.prom'), workerMetrics);
    writeFileSync(join(dir, 'api-metrics.prom'), await (await fetch(`${internalUrl}/metrics`)).text());
    if (paymentsUrl !== internalUrl) writeFileSync(join(dir, 'payments-api-metrics.prom'), await (await fetch(`${paymentsUrl}/metrics`)).text());
    writeFileSync(join(dir, 'payments.jsonl'), attempts.map((a) => JSON.stringify(a)).join('\n') + '\n');
    const taskMetrics = workerTaskMetrics(workerMetrics);
    const serverAtEnd = await serverCounters(config).catch((err: unknown) => `the server's metrics did not answer: ${(err as Error).message}`);

    const settledMs = Date.now();
    print(`auditing, and reading ${accepted.length} order histories for workflow task timeouts and failures…`);
    // Both only read: side by side they take about the longer one's time, not the sum.
    const [audit, histories] = await Promise.all([
      auditSale({ pool, store, temporal, kafka: createKafka(config, 'flash-sale-demo-audit'), topic: config.KAFKA_TOPIC }, sale.saleId, accepted),
      scanHistories(temporal, accepted, paidVia),
    ]);
    const finalCounts = await dbCounts();
    const bench = latestResult('drain') as { date: string; loadavg1m: unknown; minimal?: { totalCpuMs: number; completedPerS: number }; order?: { totalCpuMs: number } } | undefined;
    const result: DemoResult = {
      saleId: sale.saleId,
      options: plainOptions,
      machine: { cores: cpus().length, node: process.version },
      processes,
      traceFiles,
      temporal: onRealServer(config.TEMPORAL_PORT) ? 'real server (frontend, history, matching, worker on PostgreSQL)' : 'dev server',
      waves: [wave1Summary, wave2Summary],
      msFromStartToLastStarted: wave1LastStartedMs,
      stagesMs: { setup: saleStartMs - runStartMs, sale: settledMs - saleStartMs, checks: Date.now() - settledMs },
      msFromStartToLastPersisted: lastPersisted.rows[0].ms === null ? null : Math.round(lastPersisted.rows[0].ms - saleStartMs),
      payments,
      paymentLatencyMs: {
        route: withMax(latencies.route),
        routeDuringStampede: withMax(latencies.routeDuringStampede),
        routeAfterStampede: withMax(latencies.routeAfterStampede),
        signal: withMax(latencies.signal),
      },
      drain: {
        orders: wave1Accepted,
        msToAllFinal: msToWave1Final,
        ordersPerS: Math.round((wave1Accepted / (msToWave1Final / 1000)) * 10) / 10,
        cpuMsPerOrder: perOrder(cpuAtStart, cpuAtWave1Final, wave1Accepted),
        apiCpuMs: Math.round(cpuAtWave1Final.api - cpuAtStart.api),
        ...(bench?.minimal && {
          baseline: { date: bench.date, loadavg1m: bench.loadavg1m, totalCpuMs: bench.minimal.totalCpuMs, completedPerS: bench.minimal.completedPerS, orderTotalCpuMs: bench.order?.totalCpuMs },
        }),
      },
      stampede: {
        ms: atSoldOut.atMs - cpuAtStart.atMs,
        answered: wave1.filter((r) => r.answeredAtMs <= atSoldOut.atMs).length,
        cpuMs: Object.fromEntries(MACHINE_PARTS.map((k) => [k, Math.round(atSoldOut[k] - cpuAtStart[k])])) as Record<(typeof MACHINE_PARTS)[number], number>,
      },
      workflowTasks: { ...taskMetrics, ...histories },
      ...(serverAtStart && serverAtEnd && { server: typeof serverAtEnd === 'string' ? serverAtEnd : serverFigures(serverAtStart, serverAtEnd, accepted.length) }),
      finalCounts: { units: totalUnits, ...finalCounts },
      audit,
      reportFiles: [join(dir, 'report.json'), join(dir, 'report.md')],
    };
    writeFileSync(result.reportFiles[0], JSON.stringify(result, null, 2));
    writeFileSync(result.reportFiles[1], renderMarkdown(result));
    return result;
  } finally {
    stopping = true;
    clearInterval(progress);
    stopRowWatch();
    await Promise.allSettled(inFlightPayments);
    await Promise.allSettled(children.map((c) => c.stop()));
    await Promise.allSettled([pool.end(), redis.quit(), temporal.connection.close(), paymentService.close()]);
  }
}

/** The route's answers: paid, refused late, then any other refusal by its code. */
function routeLine(route: Record<string, number>): string {
  const { PAID: paid = 0, PAYMENT_WINDOW_CLOSED: late = 0, ...other } = route;
  const rest = Object.entries(other).map(([code, n]) => `${code} ${n}`);
  return [`paid ${paid}`, `refused because late (PAYMENT_WINDOW_CLOSED) ${late}`, ...rest].join(', ');
}

/** The real server's figures per order, or why there are none. */
function serverLine(server: DemoResult['server']): string {
  if (server === undefined) return '';
  if (typeof server === 'string') return ` Real server's counters: none (${server}).`;
  const pairs = (figures: Record<string, number>) => Object.entries(figures).map(([k, v]) => `${k} ${v}`).join(', ');
  return ` On the real server, per accepted order (both waves): ${server.actions} actions (${pairs(server.actionsByType)}), ${server.persistenceRequests} persistence requests (all namespaces, background work included), CPU ms ${pairs(server.cpuMsByService)}.`;
}

const lag = (l: LagSummary) => (l.count ? `${l.count} orders, p50 ${l.p50}, p99 ${l.p99}, max ${l.max}` : 'none');

/** The report as Markdown: waves, latencies, timings, final counts, audit. */
export function renderMarkdown(r: DemoResult): string {
  const d = r.drain;
  const st = r.stampede;
  const w = r.workflowTasks;
  const latency = (l: LatencyWithMax) => (l.count ? `${l.p50} / ${l.p99} / ${l.max}` : '-');
  const ratio = (a: number, b: number) => (b ? Math.round((a / b) * 100) / 100 : '-');
  const waveRow = (name: string, w: WaveSummary) =>
    `| ${name} | ${w.requests} | ${w.offeredRate} | ${w.servedRate} | ${Object.entries(w.statusCounts)
      .map(([s, n]) => `${s}: ${n}`)
      .join(', ')} | ${w.latencyAcceptedMs.p50} / ${w.latencyAcceptedMs.p95} / ${w.latencyAcceptedMs.p99} | ${w.latencySoldOutMs.p50} / ${w.latencySoldOutMs.p95} / ${w.latencySoldOutMs.p99} | ${w.msToSoldOut ?? '-'} | ${w.msToLastAccepted ?? '-'} |`;
  return [
    `# Flash sale demo — sale ${r.saleId}`,
    '',
    `Machine: ${r.machine.cores} cores, Node ${r.machine.node}. Buyers: ${r.options.buyers} + ${r.options.secondWaveBuyers}; units: ${r.options.items} × ${r.options.quantity}; payment window ${r.options.paymentWindowMs} ms.`,
    '',
    `Processes: ${r.processes.join(', ')}; Temporal: ${r.temporal}.`,
    '',
    '| wave | requests | offered req/s | served req/s | statuses | 202 latency p50/p95/p99 ms | 410 latency p50/p95/p99 ms | ms to sold out | ms to last 202 |',
    '|---|---|---|---|---|---|---|---|---|',
    waveRow('1 (stampede)', r.waves[0]),
    waveRow('2 (units back)', r.waves[1]),
    '',
    `Stages: setup ${(r.stagesMs.setup / 1000).toFixed(1)} s → sale until every order settled ${(r.stagesMs.sale / 1000).toFixed(1)} s → audit and history scan ${(r.stagesMs.checks / 1000).toFixed(1)} s (whole run ${((r.stagesMs.setup + r.stagesMs.sale + r.stagesMs.checks) / 1000).toFixed(1)} s, without the shell's install and service checks).`,
    '',
    `Wave 1, from the sale's start: sold out (the ${r.finalCounts.units}th 202) ${r.waves[0].msToSoldOut ?? '-'} ms, last 202 ${r.waves[0].msToLastAccepted ?? '-'} ms (later 202s resold units whose payment window ended during the wave) → last workflow started ${r.msFromStartToLastStarted} ms → last order persisted ${r.msFromStartToLastPersisted ?? '-'} ms. A 202 is answered once Redis holds the reservation and its start queue entry; the starter starts the workflows at Temporal's pace.`,
    '',
    `Stampede, first press → the CPU sample after the sold-out 202 (${st.ms} ms, ${st.answered} presses answered): CPU ms ${Object.entries(st.cpuMs)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}; ${Math.round((Object.values(st.cpuMs).reduce((a, b) => a + b, 0) / Math.max(1, st.ms)) * 100) / 100} of ${r.machine.cores} cores busy.`,
    '',
    `Payments (the payment service pays ${Math.round(r.options.payShare * 100)}% of wave 1's orders, half by each path, and every order of wave 2 by the route), by what became of them:`,
    `- **route** (\`POST /orders/{id}/payment\`: the payment service's own call, decided by PostgreSQL from the 202 on, whether or not the order's workflow has run): ${routeLine(r.payments.route)}.`,
    `- **\`paid\` signal** (how a payment service that talks to Temporal reports a payment; its buyer pays a think time after the order is stored, before the deadline): paid ${r.payments.signal.paid}, refused because the workflow handled it after the deadline ${r.payments.signal.handledAfterDeadline} (each refused signal is a PaymentRefundRequired event).`,
    `- buyers back after the checkout closed at their order's deadline (nothing charged, nothing sent): route ${r.payments.checkoutClosed.route}, signal ${r.payments.checkoutClosed.signal} (a signal's checkout opens only once its order is stored).`,
    `- retried after a 503 or a network error ${r.payments.retried} (503s ${r.payments.unavailable}, ${r.payments.unavailableWithRetryAfter} with Retry-After), given up ${r.payments.failed}. Answered in (ms, per attempt, p50 / p99 / max): route ${latency(r.paymentLatencyMs.route)} (sent during wave 1's presses ${latency(r.paymentLatencyMs.routeDuringStampede)}, after them ${latency(r.paymentLatencyMs.routeAfterStampede)}), signal ${latency(r.paymentLatencyMs.signal)}.`,
    '',
    `Drain of wave 1: ${d.orders} orders final ${d.msToAllFinal} ms after the start, ${d.ordersPerS} orders/s; CPU per order ${d.cpuMsPerOrder.total} ms (Temporal ${d.cpuMsPerOrder.temporal}, worker ${d.cpuMsPerOrder.worker}, PostgreSQL ${d.cpuMsPerOrder.postgres}); the API process ${d.apiCpuMs} ms in all.`,
    d.baseline
      ? `Baseline, tools/bench/drain.ts of ${d.baseline.date} (load ${String(d.baseline.loadavg1m)}): minimal workflow ${d.baseline.totalCpuMs} ms CPU, ${d.baseline.completedPerS} completed/s; this drain's order costs ${ratio(d.cpuMsPerOrder.total, d.baseline.totalCpuMs)}× its CPU at ${ratio(d.ordersPerS, d.baseline.completedPerS)}× its rate${d.baseline.orderTotalCpuMs ? ` (the bench's own order: ${d.baseline.orderTotalCpuMs} ms)` : ''}.`
      : 'Baseline: none on this machine yet. `npm run bench -- drain` measures it (a few minutes) and appends it to reports/bench.jsonl; the next demo reports this drain beside it.',
    '',
    `Workflow tasks: ${w.executed} executed, p50 ≤ ${w.executionMs.p50} ms, p99 ≤ ${w.executionMs.p99} ms, ${w.slowExecutions.count} over ${w.slowExecutions.bound} ms; schedule-to-start p50 ≤ ${w.scheduleToStartMs.p50} ms, p99 ≤ ${w.scheduleToStartMs.p99} ms; ${w.executionFailed} failed, ${w.stickyCacheMisses} sticky cache misses. In ${w.historiesScanned} order histories: ${w.timedOutInHistory} workflow task timeouts; workflow task failures by cause: ${Object.entries(w.failedInHistory).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}.`,
    `Per order: ${w.perOrder.events} history events, ${w.perOrder.workflowTasks} workflow tasks, ${w.perOrder.stateTransitions} state transitions.${serverLine(r.server)} UNHANDLED_COMMAND by payment path and first run: ${Object.entries(w.unhandledCommandBy).map(([k, v]) => `${k} ${v}`).join('; ') || 'none'}.`,
    `Unpaid units back in stock after their deadline (EXPIRED orders; ms): workflow started before the deadline ${lag(w.returnLagMs.startedBeforeDeadline)}; workflow first ran after it ${lag(w.returnLagMs.firstRanAfterDeadline)}.`,
    '',
    `Final orders: ${Object.entries(r.finalCounts)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    '```',
    formatAudit(r.audit),
    '```',
    '',
  ].join('\n');
}
