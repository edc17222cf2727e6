/**
 * A starter's metrics (prom-client): its workflow starts and their failures, Temporal's backlog as it reads it,
 * and the start queues of the sales it watches (entries waiting per sale, the oldest one's age), read from Redis
 * at each scrape (in the API, from the last reading of a timer: src/api/polled.ts). Registered on the registry of
 * the process the starter runs in: the API's /metrics, or, for `npm run starter`, an endpoint of its own
 * (STARTER_METRICS_PORT), so that the dashboard and the start queue alerts see every starter wherever it runs.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Config } from '../config';
import type { StartHooks } from './starter';

/** Entries still to be started per sale id, and the oldest one's age in ms (null when empty). */
export type QueueDepths = () => Promise<Map<number, { waiting: number; oldestAgeMs: number | null }>>;

/**
 * Registers a starter's metrics on `registry`.
 * @param queueDepths reads the start queues of the sales the starter watches (at each scrape; concurrent
 *   scrapes share one reading)
 * @returns the hooks that count the starter's starts, failures and backlog readings (createStarter's)
 */
export function starterMetrics(registry: Registry, queueDepths: QueueDepths): StartHooks {
  const starts = new Counter({
    name: 'flash_sale_workflow_starts_total',
    help: 'Order workflows started by this process\'s starter; already_started: another start got there first.',
    labelNames: ['result'] as const,
    registers: [registry],
  });
  const backlog = new Gauge({
    name: 'flash_sale_workflow_task_backlog',
    help: 'Workflow tasks waiting for a worker on the order task queue, as the starter last read it (it waits above STARTER_MAX_BACKLOG).',
    registers: [registry],
  });
  const failures = new Counter({
    name: 'flash_sale_workflow_start_failures_total',
    help: 'Workflow starts that failed, by cause; the entry is tried again (invalid_entry: set aside, never started).',
    labelNames: ['cause'] as const,
    registers: [registry],
  });
  // prom-client collects all metrics of a scrape at once: the two start queue gauges share one read.
  let reading: ReturnType<QueueDepths> | undefined;
  const depths = () =>
    (reading ??= queueDepths().finally(() => {
      reading = undefined;
    }));
  const startQueueGauge = (name: string, help: string, value: (depth: { waiting: number; oldestAgeMs: number | null }) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['sale_id'] as const,
      registers: [registry],
      async collect() {
        const all = await depths();
        this.reset();
        for (const [saleId, depth] of all) this.set({ sale_id: String(saleId) }, value(depth));
      },
    });
  startQueueGauge('flash_sale_start_queue_waiting', 'Accepted orders whose workflow is still to be started, per sale (read from Redis at each scrape; by the API, every second).', (d) => d.waiting);
  startQueueGauge(
    'flash_sale_start_queue_oldest_age_seconds',
    'Age of the oldest accepted order still waiting for its workflow, per sale (0 when none waits).',
    (d) => (d.oldestAgeMs ?? 0) / 1000,
  );
  const repairs = new Counter({
    name: 'flash_sale_reconciler_repairs_total',
    help: 'Repairs of Redis from PostgreSQL by this process\'s reconciler, by kind: each means Redis had lost or reordered a write (docs/operations.md).',
    labelNames: ['kind'] as const,
    registers: [registry],
  });
  const passes = new Histogram({
    name: 'flash_sale_reconciler_pass_seconds',
    help: 'Length of this process\'s reconciler passes over one sale, full or incremental (changed).',
    labelNames: ['pass'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  return {
    onStarted: (result) => starts.inc({ result: result === 'started' ? 'started' : 'already_started' }),
    onFailure: (cause) => failures.inc({ cause }),
    onBacklog: (tasks) => backlog.set(tasks),
    onReconciled: (full, ms, made) => {
      passes.observe({ pass: full ? 'full' : 'changed' }, ms / 1000);
      for (const repair of made) repairs.inc({ kind: repair.kind });
    },
  };
}

/** A starter's own metrics endpoint: the hooks for createStarter, then the starter's queue reading, and a close. */
export interface StarterEndpoint {
  hooks: StartHooks;
  /** Sets where the start queue gauges are read from (the starter, once made); until then they are empty. */
  readFrom(queueDepths: QueueDepths): void;
  close(): Promise<void>;
}

/**
 * A starter's own metrics (and Node's defaults) at GET /metrics on STARTER_METRICS_HOST:STARTER_METRICS_PORT, for
 * the processes whose starter has no API beside it; with port 0, hooks that count nothing. Bind it before the
 * process starts its work, so that a port in use stops the start, not a running process.
 * @throws the listen error (EADDRINUSE…)
 */
export async function starterMetricsOf(config: Pick<Config, 'STARTER_METRICS_HOST' | 'STARTER_METRICS_PORT'>): Promise<StarterEndpoint> {
  if (!config.STARTER_METRICS_PORT) {
    const noop = () => undefined;
    return { hooks: { onStarted: noop, onFailure: noop, onBacklog: noop, onReconciled: noop }, readFrom: noop, close: () => Promise.resolve() };
  }
  let source: QueueDepths = () => Promise.resolve(new Map());
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const hooks = starterMetrics(registry, () => source());
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') return void res.writeHead(404).end();
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(500).end(String(err)),
    );
  });
  server.listen(config.STARTER_METRICS_PORT, config.STARTER_METRICS_HOST);
  await once(server, 'listening');
  return {
    hooks,
    readFrom: (queueDepths) => {
      source = queueDepths;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
