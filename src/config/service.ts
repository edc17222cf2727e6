/** What every process reads: its mode, logs and traces; the starter's pace; the sales' default window. */
import { z } from 'zod';
import { count, flag, positiveMs, type Issue } from './kinds';

/** STARTER_CLAIM_IDLE_MS's default (ms): stale purchase claims and start queue entries are taken over at this age. */
export const DEFAULT_CLAIM_IDLE_MS = 30_000;

export const serviceFields = {
  /**
   * production unless said: development secrets are refused, development routes never mounted, and the stores'
   * default password and clear text off loopback refused (src/config/index.ts). development and test lift that.
   */
  NODE_ENV: z.enum(['development', 'test', 'production']).default('production'),
  /**
   * Production: a store off loopback reached in clear text (PGSSLMODE disable, no TLS to Redis, Kafka or
   * Temporal) is refused unless this says the network between them is private.
   */
  ALLOW_PLAINTEXT_STORES: flag(false),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

  /**
   * Traces (OpenTelemetry, src/tracing/index.ts), by its standard variables. OTEL_TRACES_EXPORTER: none (the
   * default: no tracer is installed), otlp (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT or
   * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which the exporter reads itself), or jsonl, ours: one JSON line per span
   * appended to OTEL_TRACES_FILE, for `npm run trace` where no collector runs.
   */
  OTEL_TRACES_EXPORTER: z.enum(['none', 'otlp', 'jsonl']).default('none'),
  OTEL_TRACES_FILE: z.string().min(1).default('traces.jsonl'),
  /** service.name of this process' spans; the default is the process' role (flash-sale-api, -worker, -starter). */
  OTEL_SERVICE_NAME: z.string().min(1).optional(),
  /** The SDK's samplers (it reads these two itself); the default samples every trace a parent does not decide. */
  OTEL_TRACES_SAMPLER: z
    .enum(['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'])
    .default('parentbased_always_on'),
  OTEL_TRACES_SAMPLER_ARG: z.coerce.number().min(0).max(1).optional(),

  /** The payment window of a sale created without one (ms). */
  DEFAULT_PAYMENT_WINDOW_MS: positiveMs(600_000),
  /**
   * Whether the API process runs a starter (src/starter/). false: the workflows of the orders it accepts are
   * started by starter processes (`npm run starter`) that share its Redis, PostgreSQL and Temporal.
   */
  STARTER_IN_API: flag(true),
  /** Workflow starts a starter keeps in flight at most. */
  STARTER_MAX_IN_FLIGHT: count(1, 10_000, 20),
  /** The starter starts nothing while more workflow tasks than this wait for a worker on the task queue. */
  STARTER_MAX_BACKLOG: count(1, 1_000_000, 200),
  /**
   * The starter starts nothing while the sales accept this many orders per second or more, counted over every API
   * process (0: never waits; src/starter/gates.ts): above the starts/s a Temporal server takes at best
   * (docs/performance.md), so a queue filled at that pace would not drain sooner for being started meanwhile.
   */
  STARTER_YIELD_ABOVE_PER_S: count(0, 1_000_000, 200),
  /**
   * The longest the starter waits in a row for the stampede (ms): a sale that keeps that pace for longer still
   * gets its workflows, so that unpaid orders expire and their units come back. Well under the shortest payment
   * window: an order waiting to start is not settled at its deadline.
   */
  STARTER_YIELD_MAX_MS: positiveMs(60_000),
  /**
   * An accepted order left pending this long by a starter (one that died, or whose start failed) is claimed by
   * another; longer than TEMPORAL_CALL_TIMEOUT_MS, so that a start still in flight is not taken. A purchase claim
   * this old (by Redis' clock) is repaired, every half of it; a claim's unit may be taken for half of it
   * (src/reservation/claims.ts).
   */
  STARTER_CLAIM_IDLE_MS: positiveMs(DEFAULT_CLAIM_IDLE_MS),
  /**
   * How often each starter's reconciler runs a round over the sales still open or settling (ms;
   * src/reservation/reconciler.ts): an incremental pass over the orders changed since the last round, which
   * repairs a lost release or reservation within about this long of its order's last change.
   */
  RECONCILE_INTERVAL_MS: positiveMs(1000),
  /**
   * A full pass per sale this often (ms), one process's for all: every unit, reservation, buyer's entry and mark
   * of each shard compared with PostgreSQL, which finds what Redis lost with no order changing. A master that
   * changed (a failover, a restart) brings every sale's full pass forward to the next round. Its cost grows with
   * the sale's live orders (docs/performance.md).
   */
  RECONCILE_FULL_INTERVAL_MS: positiveMs(60_000),
  /**
   * How long the reservation of an order that ended is left to its own compensation before the reconciler gives
   * its unit back (ms): the workflow's release follows the settle within milliseconds when it runs.
   */
  RECONCILE_GRACE_MS: positiveMs(2000),
  /**
   * Port of the starter's own Prometheus endpoint (src/starter/metrics.ts), for a starter without an API beside
   * it (`npm run starter`); 0: none. An API's starter reports on its /metrics.
   */
  STARTER_METRICS_PORT: count(0, 65535, 0),
  STARTER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
};

type Env = z.infer<z.ZodObject<typeof serviceFields>> & { TEMPORAL_CALL_TIMEOUT_MS: number };

export function checkService(env: Env, issue: Issue): void {
  if (env.STARTER_CLAIM_IDLE_MS <= env.TEMPORAL_CALL_TIMEOUT_MS) {
    issue('STARTER_CLAIM_IDLE_MS', `must exceed TEMPORAL_CALL_TIMEOUT_MS (${env.TEMPORAL_CALL_TIMEOUT_MS})`);
  }
}
