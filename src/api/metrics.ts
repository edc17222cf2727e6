/** Prometheus metrics (prom-client) served on /metrics: purchase outcomes, latency, reservations, sold-out flags. */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

// SOLD_OUT answers held back before they are handed to prom-client in one go.
const DEFERRED_MAX = 4096;

/** @param soldOutCount reads the number of items flagged sold out in this process */
export function createMetrics(soldOutCount: () => number) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  // SOLD_OUT answers, the stampede's, are recorded in batches: one by one, the sold-out answer cost 74–81 µs of
  // server CPU against 58–65 µs batched (bench/soldout.ts, two passes; a hot loop shows only ~0.3 µs, so most
  // of it is what prom-client's label validation and hashing do to the caches of a busy server). Batches are
  // flushed in order when full and before every scrape (`collect`), so /metrics shows exactly what one-by-one
  // recording would, down to the order of the floating-point additions in `_sum`.
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
    registry,
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
    reservations: new Counter({
      name: 'flash_sale_reservations_total',
      help: 'Units reserved in Redis, and reservations released because the workflow could not start.',
      labelNames: ['result'] as const,
      registers: [registry],
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
