/** Prometheus metrics (prom-client) served on /metrics: purchase outcomes, latency, reservations, sold-out flags. */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** @param soldOutCount reads the number of items flagged sold out in this process */
export function createMetrics(soldOutCount: () => number) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    purchaseOutcomes: new Counter({
      name: 'flash_sale_purchase_outcomes_total',
      help: 'Purchase answers by outcome code (PENDING or the error code).',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
    purchaseDuration: new Histogram({
      name: 'flash_sale_purchase_duration_seconds',
      help: 'Purchase request latency by outcome code.',
      labelNames: ['code'] as const,
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
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
