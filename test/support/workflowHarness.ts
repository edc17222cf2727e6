/**
 * Shared set-up of the workflow suites that run on the dev server: registers beforeAll/afterAll that install
 * the Temporal runtime with WARN logs, connect the clients, open a Kafka tap on the orders topic, start the
 * production worker on the config's task queue and a Temporal client (and, when asked, the real API), then
 * close them all.
 */
import type { Client } from '@temporalio/client';
import { startApi, type RunningApi } from '../../src/api/main';
import type { Config } from '../../src/config';
import { connectTemporal } from '../../src/workflows/client';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { connectClients, type Clients } from './helpers';
import { openEventTap, type EventTap } from './kafka';
import { installTestRuntime } from './temporalRuntime';

export interface WorkflowHarness {
  clients: Clients;
  worker: RunningWorker;
  temporal: Client;
  tap: EventTap;
  /** Started only when the suite asks for it (options.api). */
  api: RunningApi;
}

/**
 * @param options.api whether to start the real API too
 * @returns the harness, whose fields are set once the suite's first beforeAll has run
 */
export function useWorkflowHarness(config: Config, options: { api: boolean }): WorkflowHarness {
  const harness = {} as WorkflowHarness;
  beforeAll(async () => {
    installTestRuntime();
    harness.clients = connectClients(config);
    harness.tap = await openEventTap(config);
    harness.worker = await startWorker(config, await buildWorkflowBundle());
    harness.temporal = await connectTemporal(config);
    if (options.api) harness.api = await startApi(config);
  }, 120_000);
  afterAll(async () => {
    await Promise.allSettled([harness.api?.close(), harness.worker?.shutdown()]);
    await Promise.allSettled([harness.temporal?.connection.close(), harness.tap?.close(), harness.clients?.close()]);
  });
  return harness;
}
