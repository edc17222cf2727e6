/**
 * The worker process of tools/bench/drain.ts: the production worker (startWorker, same options and activities) on
 * the task queue the bench gives it (TEMPORAL_TASK_QUEUE), and beside it in the same process the baseline's worker
 * (the minimal workflow and its no-op activity) on BENCH_DRAIN_BASELINE_QUEUE, so both kinds share one process,
 * one runtime and one server. Core's metrics on WORKER_METRICS_PORT (the bench reads the sticky cache's hits and
 * misses there). Prints "drain worker running" once both poll; SIGTERM drains and exits.
 */
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { loadConfig } from '../../src/config';
import { temporalConnection } from '../../src/infra/connections';
import { createLogger } from '../../src/infra/logger';
import { installWorkerRuntime, startWorker } from '../../src/worker/main';

async function main(): Promise<void> {
  const config = loadConfig();
  const baselineQueue = process.env.BENCH_DRAIN_BASELINE_QUEUE;
  if (!baselineQueue) throw new Error('BENCH_DRAIN_BASELINE_QUEUE is not set (tools/bench/drain.ts sets it)');
  installWorkerRuntime(config, createLogger(config.LOG_LEVEL, 'drain-worker'));
  const workflowBundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./drainWorkflows') });
  const running = await startWorker(config, { workflowBundle });
  const connection = await NativeConnection.connect(temporalConnection(config));
  const baseline = await Worker.create({
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueue: baselineQueue,
    workflowBundle,
    activities: { noop: async () => undefined },
  });
  const baselineRun = baseline.run();
  console.log('drain worker running');
  process.once('SIGTERM', () => {
    baseline.shutdown();
    void Promise.all([running.shutdown(), baselineRun.then(() => connection.close())]).then(() => process.exit(0));
  });
  await Promise.all([running.run, baselineRun]);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
