/**
 * Prometheus metrics (prom-client) served on /metrics: purchase outcomes, latency, reservations, sold-out flags,
 * and its starter's (src/starter/metrics.ts): the start queues, workflow starts and their failures.
 */
import type { Pool } from 'pg';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { starterMetrics, type QueueDepths } from '../starter/metrics';

// SOLD_OUT answers held back before they are handed to prom-client in one go.
const DEFERRED_MAX = 4096;

/** The PostgreSQL pool's counts, as pg's Pool reports them. */
export type PoolCounts = Pick<Pool, 'totalCount' | 'idleCount' | 'waitingCount'>;

/** Whether each store the API needs answers (src/api/routes/ops.ts, dependencyChecks). */
export type Dependencies = () => Promise<Record<string, { up: boolean }>>;

/**
 * The purchase series: answers by code and their latency. SOLD_OUT answers, the stampede's, are recorded in
 * batches: one by one, prom-client's label validation and hashing were a measurable share of the sold-out
 * answer's CPU (docs/performance.md). Batches are flushed in order when full and before every scrape
 * (`collect`), so /metrics shows exactly what one-by-one recording would, down to the order of the
 * floating-point additions in `_sum`.
 */
function purchaseSeries(registry: Registry) {
  const deferredSeconds = new Float64Array(DEFERRED_MAX);
  let deferred = 0;
  const flushSoldOut = () => {
    if (deferred === 0) return;
    purchaseOutcomes.labels('SOLD_OUT').inc(deferred);
    const duration = purchaseDuration.labels('SOLD_OUT');
    for (let i = 0; i < deferred; i++) duration.observe(deferredSeconds[i]);
    deferred = 0;
  };

  const purchaseOutcomes = new Counter({
    name: 'flash_sale_purchase_outcomes_total',
    help: 'Purchase answers by outcome code (PENDING or the error code).',
    labelNames: ['code'] as const,
    registers: [registry],
    collect: flushSoldOut,
  });
  const purchaseDuration = new Histogram({
    name: 'flash_sale_purchase_duration_seconds',
    help: 'Purchase request latency by outcome code.',
    labelNames: ['code'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
    collect: flushSoldOut,
  });
  return {
    purchaseOutcomes,
    purchaseDuration,
    /**
     * Records one SOLD_OUT answer under both purchase metrics, as `inc` and `observe` would: every SOLD_OUT
     * answer must come through here, so that the batch keeps their order.
     * @param seconds the answer's latency
     */
    recordSoldOut(seconds: number): void {
      deferredSeconds[deferred++] = seconds;
      if (deferred === DEFERRED_MAX) flushSoldOut();
    },
  };
}

/**
 * @param soldOutCount reads the number of items flagged sold out in this process
 * @param queueDepths reads the start queues of the sales this process's starter watches (at each scrape; the API
 *   hands it the last reading of a timer, src/api/polled.ts)
 * @param pool the PostgreSQL pool whose connections and waiting queries are read at each scrape (in memory)
 * @param dependencies the stores' status at each scrape, as /readyz reads it (the "store down" alert reads it;
 *   the API hands it the last check of a timer)
 */
export function createMetrics(soldOutCount: () => number, queueDepths: QueueDepths, pool: PoolCounts, dependencies: Dependencies) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const { purchaseOutcomes, purchaseDuration, recordSoldOut } = purchaseSeries(registry);
  // A payment that waits for a connection waits here, not in PostgreSQL: the pool's queue is the first suspect.
  new Gauge({
    name: 'flash_sale_pg_pool_connections',
    help: 'PostgreSQL pool connections of this process by state (busy, idle), and queries waiting for one (waiting).',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      this.set({ state: 'busy' }, pool.totalCount - pool.idleCount);
      this.set({ state: 'idle' }, pool.idleCount);
      this.set({ state: 'waiting' }, pool.waitingCount);
    },
  });
  return {
    registry,
    purchaseOutcomes,
    purchaseDuration,
    recordSoldOut,
    paymentDuration: new Histogram({
      name: 'flash_sale_payment_duration_seconds',
      help: 'Payment route latency in the API (from its routing to the answer), by answer code (PAID or the refusal).',
      labelNames: ['code'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    /**
     * Answers to requests whose credential was missing or refused (or that were limited before it was read), apart
     * from the purchase and payment series the alerts read, so that a flood of them dilutes no ratio or latency.
     */
    unauthenticated: new Counter({
      name: 'flash_sale_unauthenticated_answers_total',
      help: 'Answers to requests without a verified credential, by route (purchase, order, payment, admin) and code.',
      labelNames: ['route', 'code'] as const,
      registers: [registry],
    }),
    /** Cancel answers by who asked (CancelReason) and code (CANCELLED or the refusal's). */
    cancels: new Counter({
      name: 'flash_sale_cancel_answers_total',
      help: 'Cancel answers by reason (BUYER, PAYMENT_FAILED, OPERATOR) and code (CANCELLED or the refusal).',
      labelNames: ['reason', 'code'] as const,
      registers: [registry],
    }),
    /** Refused internal-door credentials: each wrong or missing token, and each request refused for too many. */
    credentialFailures: new Counter({
      name: 'flash_sale_credential_failures_total',
      help: 'Internal door: refused admin and payment-service credentials by credential and code (TOKEN_MISSING, FORBIDDEN, RATE_LIMITED).',
      labelNames: ['credential', 'code'] as const,
      registers: [registry],
    }),
    reservations: new Counter({
      name: 'flash_sale_reservations_total',
      help: 'Units reserved in Redis (each with its start queue entry).',
      registers: [registry],
    }),
    starterHooks: starterMetrics(registry, queueDepths),
    dependencyUp: new Gauge({
      name: 'flash_sale_dependency_up',
      help: 'Whether each store this process needs answers (1) or not (0), as /readyz last checked it (every second).',
      labelNames: ['dependency'] as const,
      registers: [registry],
      async collect() {
        // A reading that failed leaves the last values: the scrape itself must not fail (503) while a store is away.
        const readings = await dependencies().catch(() => undefined);
        for (const [dependency, status] of Object.entries(readings ?? {})) this.set({ dependency }, status.up ? 1 : 0);
      },
    }),
    soldOutItems: new Gauge({
      name: 'flash_sale_sold_out_items',
      help: 'Items this process answers SOLD_OUT for from memory.',
      registers: [registry],
      collect() {
        this.set(soldOutCount());
      },
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
