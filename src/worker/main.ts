/**
 * Worker process (`npm run worker`): runs orderWorkflow and its activities on the configured task queue, from
 * the workflow bundle `npm run build` made (src/worker/bundle.ts), and the outbox relay that publishes the orders'
 * events to Kafka (one worker's at a time: src/order/outbox.ts). SIGINT/SIGTERM drain in-flight tasks and close
 * the clients.
 */
import { once } from 'node:events';
import { makeWorkflowExporter, OpenTelemetryActivityInboundInterceptor, OpenTelemetryActivityOutboundInterceptor, type SerializableSpan } from '@temporalio/interceptors-opentelemetry';
import { NativeConnection, Runtime, Worker, type LogLevel, type LogMetadata, type Logger as TemporalLogger, type WorkerOptions } from '@temporalio/worker';
import type { WorkflowInfo } from '@temporalio/workflow';
import { createActivities } from '../activities';
import { paidSignalAt } from '../workflows/history';
import { loadConfig, type Config } from '../config';
import { temporalConnection } from '../infra/connections';
import { createPool } from '../infra/db';
import { checkKafka, createKafka, UNTIL_ANSWERED } from '../infra/kafka';
import { OutboxRelay } from '../order/outbox';
import { EventPublisher } from '../order/publisher';
import { Orders } from '../order/store';
import { onShutdown, runMain } from '../infra/lifecycle';
import { createLogger, type Logger } from '../infra/logger';
import { workflowBundle, type BundleOption } from './bundle';
import { ReservationStore } from '../reservation/store';
import { createRedis } from '../reservation/client';
import { SaleLayouts } from '../reservation/layout';
import { checkAtStart, reachTemporal } from '../infra/startup';
import { startTracing, type Tracing } from '../tracing';

/** A worker and the clients it owns; `shutdown` stops polling, waits for in-flight tasks, then closes them. */
export interface RunningWorker {
  worker: Worker;
  run: Promise<void>;
  shutdown(): Promise<void>;
}

/**
 * Creates and starts a worker.
 * @param log where an outage of PostgreSQL, Redis or Kafka at start is reported (the worker starts anyway)
 * @param tracing this process' tracing (src/tracing/index.ts), when on: the bundle must then be the traced one
 * @throws DependencyError naming PostgreSQL, Redis or Kafka when one is wrongly configured (TLS,
 *   credentials), or Temporal when it is out of reach; the clients opened so far are closed
 */
export async function startWorker(
  config: Config,
  bundle: BundleOption,
  log: Logger = createLogger(config.LOG_LEVEL, 'worker'),
  tracing?: Tracing,
): Promise<RunningWorker> {
  const pool = createPool(config);
  const redis = createRedis(config);
  let events: EventPublisher;
  let connection: NativeConnection;
  try {
    // Each store once, with few retries: a wrong CA or password fails the start here, where the publisher's
    // own client (which retries until answered) would wait for ever. An outage does not: the activities
    // retry until the store is back, and the relay waits for the broker.
    const warn = (line: string) => log.warn(line);
    await Promise.all([
      checkAtStart('postgres', pool.query('SELECT 1'), warn),
      checkAtStart('redis', once(redis, 'ready'), warn),
      checkAtStart('kafka', checkKafka(config), warn),
    ]);
    events = await EventPublisher.connect(createKafka(config, 'flash-sale-worker', UNTIL_ANSWERED), config.KAFKA_TOPIC);
    connection = await reachTemporal(config, NativeConnection.connect(temporalConnection(config)));
  } catch (err) {
    redis.disconnect();
    await pool.end();
    throw err;
  }
  const reservations = new ReservationStore(redis, new SaleLayouts(pool));
  const worker = await Worker.create({
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueue: config.TEMPORAL_TASK_QUEUE,
    ...bundle,
    activities: createActivities({
      orders: new Orders(pool, reservations.view),
      reservations,
      receiptSecret: config.PAYMENT_RECEIPT_SECRET,
      signalledAt: (orderId, payment) => paidSignalAt(connection.workflowService, config.TEMPORAL_NAMESPACE, orderId, payment),
    }),
    maxConcurrentActivityTaskExecutions: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
    maxConcurrentWorkflowTaskExecutions: config.WORKER_MAX_CONCURRENT_WORKFLOW_TASKS,
    maxCachedWorkflows: config.WORKER_MAX_CACHED_WORKFLOWS,
    shutdownGraceTime: '10 seconds',
    // A sale's payment deadlines fall within its stampede's seconds, so the timers of the orders waiting for
    // them fire together: their tasks queue on this worker's sticky queue for longer than the default 10 s,
    // and a task that times out there goes to the normal queue to be replayed from its history (more work in
    // the worst moment). A minute lets the worker take them in turn.
    stickyQueueScheduleToStartTimeout: '60 seconds',
    ...(tracing && tracedWorker(tracing)),
  });
  const relay = new OutboxRelay(pool, events, log);
  relay.start();
  const run = worker.run();
  return {
    worker,
    run,
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await Promise.all([run, relay.stop()]);
      await Promise.allSettled([connection.close(), events.disconnect(), redis.quit(), pool.end()]);
    },
  };
}

/**
 * What Temporal's OpenTelemetryPlugin adds to a worker, but its workflow interceptors, which a prebuilt bundle
 * holds already (the plugin's would only draw the SDK's warning): an activity's span, the child of the span that
 * scheduled it, and the sink the workflow's spans leave the sandbox through. That sink copies the whole
 * WorkflowInfo onto every workflow span, search attributes included (the buyer's id, UserId); it is handed only
 * the workflow's identity, which keeps buyer ids out of traces and a workflow span at a third of its size.
 */
function tracedWorker({ processor, resource }: Tracing): Pick<WorkerOptions, 'interceptors' | 'sinks'> {
  const { export: sink } = makeWorkflowExporter(processor, resource);
  const identity = ({ workflowId, runId, workflowType, taskQueue, namespace, attempt }: WorkflowInfo) => ({ workflowId, runId, workflowType, taskQueue, namespace, attempt });
  return {
    interceptors: {
      activity: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })],
    },
    sinks: { exporter: { export: { ...sink, fn: (info, spans: SerializableSpan[]) => sink.fn(identity(info) as WorkflowInfo, spans) } } },
  };
}

/**
 * Core's default buckets for a workflow task's execution end at 1 s; these reach the worker's 5 s warning
 * (TMPRL1104) and the 10 s workflow task timeout, so a dashboard can tell a slow task from one about to time out. ms.
 */
const TASK_EXECUTION_BUCKETS_MS = [1, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000];

/** The SDK's logger interface over pino, so that the SDK's and Core's lines are JSON lines of the worker's log. */
function sdkLogger(log: Logger): TemporalLogger {
  const write = (level: LogLevel, message: string, meta?: LogMetadata) => {
    const method = level === 'TRACE' ? 'trace' : level === 'DEBUG' ? 'debug' : level === 'INFO' ? 'info' : level === 'WARN' ? 'warn' : 'error';
    log[method]({ ...meta }, message);
  };
  return {
    log: write,
    trace: (message, meta) => write('TRACE', message, meta),
    debug: (message, meta) => write('DEBUG', message, meta),
    info: (message, meta) => write('INFO', message, meta),
    warn: (message, meta) => write('WARN', message, meta),
    error: (message, meta) => write('ERROR', message, meta),
  };
}

/**
 * Installs the Temporal runtime of a worker process: the SDK's and Core's logs (Core's from WARN, such as
 * TMPRL1104 on a slow workflow task) go to the worker's log instead of raw lines on stderr; Core's metrics
 * on a Prometheus endpoint when WORKER_METRICS_PORT is set. Call once per process, before any worker or
 * connection.
 */
export function installWorkerRuntime(config: Config, log: Logger): void {
  Runtime.install({
    logger: sdkLogger(log),
    telemetryOptions: {
      logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} },
      ...(config.WORKER_METRICS_PORT && {
        metrics: {
          prometheus: {
            bindAddress: `${config.WORKER_METRICS_HOST}:${config.WORKER_METRICS_PORT}`,
            histogramBucketOverrides: { temporal_workflow_task_execution_latency: TASK_EXECUTION_BUCKETS_MS },
          },
        },
      }),
    },
  });
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL, 'worker');
  installWorkerRuntime(config, log);
  const tracing = startTracing(config, 'worker', log);
  const running = await startWorker(config, await workflowBundle(tracing !== undefined), log, tracing);
  log.info({ taskQueue: config.TEMPORAL_TASK_QUEUE, namespace: config.TEMPORAL_NAMESPACE, node: process.version }, 'worker running');
  onShutdown(log, 'shutting down', () => running.shutdown(), tracing);
  await running.run;
}

if (require.main === module) runMain('worker', main);
