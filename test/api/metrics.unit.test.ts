/**
 * Unit tests of the purchase metrics' batch of SOLD_OUT answers (pure logic: prom-client's own registry, no
 * server). What /metrics shows must be exactly what recording each answer one by one shows, `_sum` included,
 * whether the batch was flushed because it filled up or because of the scrape.
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { createMetrics } from '../../src/api/metrics';

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** The purchase series of a scrape: `name{labels} value` lines of the two purchase metrics, sorted. */
async function purchaseSeries(registry: Registry): Promise<string[]> {
  const text = await registry.metrics();
  return text
    .split('\n')
    .filter((line) => /^flash_sale_purchase_(outcomes_total|duration_seconds_(bucket|sum|count))\{/.test(line))
    .sort();
}

/** The same two metrics recorded one answer at a time, as the reference. */
function oneByOne(): { registry: Registry; record(code: string, seconds: number): void } {
  const registry = new Registry();
  const outcomes = new Counter({ name: 'flash_sale_purchase_outcomes_total', help: 'x', labelNames: ['code'], registers: [registry] });
  const duration = new Histogram({ name: 'flash_sale_purchase_duration_seconds', help: 'x', labelNames: ['code'], buckets: BUCKETS, registers: [registry] });
  return {
    registry,
    record(code, seconds) {
      outcomes.labels(code).inc();
      duration.labels(code).observe(seconds);
    },
  };
}

test.each([
  ['fewer answers than a batch (flushed by the scrape)', 7],
  ['more than one full batch (flushed when full, the rest by the scrape)', 10_000],
])('SOLD_OUT answers: %s → the same series as one-by-one recording', async (_name, count) => {
  const metrics = createMetrics(() => 0, async () => new Map(), { totalCount: 0, idleCount: 0, waitingCount: 0 }, async () => ({}));
  const reference = oneByOne();
  // Latencies spread over every bucket and past the last one.
  const seconds = Array.from({ length: count }, (_, i) => ((i * 7919) % 3000) / 1000);
  for (const s of seconds) {
    metrics.recordSoldOut(s);
    reference.record('SOLD_OUT', s);
  }
  metrics.purchaseOutcomes.labels('PENDING').inc();
  metrics.purchaseDuration.labels('PENDING').observe(0.02);
  reference.record('PENDING', 0.02);

  const series = await purchaseSeries(metrics.registry);
  expect(series).toContain(`flash_sale_purchase_outcomes_total{code="SOLD_OUT"} ${count}`);
  expect(series).toContain(`flash_sale_purchase_duration_seconds_count{code="SOLD_OUT"} ${count}`);
  expect(series).toEqual(await purchaseSeries(reference.registry));
  // A second scrape adds nothing: each answer is counted once.
  expect(await purchaseSeries(metrics.registry)).toEqual(series);
});

test('flash_sale_dependency_up reads the stores at each scrape: 1 for each that answers, 0 for each that does not', async () => {
  let postgresUp = true;
  const metrics = createMetrics(() => 0, async () => new Map(), { totalCount: 0, idleCount: 0, waitingCount: 0 }, async () => ({ redis: { up: true }, postgres: { up: postgresUp } }));
  const scrape = async () => (await metrics.registry.getSingleMetric('flash_sale_dependency_up')?.get())?.values.map((v) => [v.labels.dependency, v.value]);
  expect(await scrape()).toEqual([
    ['redis', 1],
    ['postgres', 1],
  ]);
  postgresUp = false;
  expect(await scrape()).toEqual([
    ['redis', 1],
    ['postgres', 0],
  ]);
});
