/** The demo's options, and the report's shape (report.json; report.ts renders it). */
import type { AuditReport } from '../../src/audit';
import type { MACHINE_PARTS } from '../shared/procCpu';
import type { latencySummary } from '../../test/support/stats';

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
  /** Share of first-wave orders whose buyer cancels (of those not paid) and presses Buy again. */
  cancelShare: number;
  /** Share of the payment service's route checkouts whose charge is declined: reported as a payment failure. */
  declineShare: number;
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
  cancelShare: 0.05,
  declineShare: 0.05,
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
  /** Wave 1's buyers who cancelled and pressed again (BuyerCancels). */
  cancels: CancelTally;
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
   * by the path they would have paid through.
   */
  checkoutClosed: { route: number; signal: number };
  retried: number;
  failed: number;
  unavailable: number;
  unavailableWithRetryAfter: number;
  /** Declined charges reported (POST /orders/{id}/payment-failure), by answer: CANCELLED or the refusal's code. */
  declined: Record<string, number>;
}

export function newPaymentTally(): PaymentTally {
  return { route: {}, signal: { paid: 0, handledAfterDeadline: 0 }, checkoutClosed: { route: 0, signal: 0 }, retried: 0, failed: 0, unavailable: 0, unavailableWithRetryAfter: 0, declined: {} };
}

/** Buyers' cancels by answer (CANCELLED or the refusal's code), and their second presses by HTTP status. */
export interface CancelTally {
  cancels: Record<string, number>;
  boughtAgain: Record<string, number>;
}

export function newCancelTally(): CancelTally {
  return { cancels: {}, boughtAgain: {} };
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

export interface LagSummary {
  count: number;
  p50: number;
  p99: number;
  max: number;
}
