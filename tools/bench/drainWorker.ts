/**
 * The worker process of tools/bench/drain.ts: the production worker (startWorker, same options and activities) on
 * the task queue the bench gives it, with the bench's workflows bundled and the baseline's no-op activity added.
 * Core's metrics on WORKER_METRICS_PORT (the bench reads the sticky cache's hits and misses there). Prints
 * "drain worker running" once it polls; SIGTERM drains and exits.
 */
import { bundleWorkflowCode } from '@temporalio/worker';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { installWorkerRuntime, startWorker } from '../../src/worker/main';

async function main(): Promise<void> {
  const config = loadConfig();
  installWorkerRuntime(config, createLogger(config.LOG_LEVEL, 'drain-worker'));
  const workflowBundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./drainWorkflows') });
  const running = await startWorker(config, { workflowBundle }, { noop: async () => undefined });
  console.log('drain worker running');
  process.once('SIGTERM', () => void running.shutdown().then(() => process.exit(0)));
  await running.run;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
