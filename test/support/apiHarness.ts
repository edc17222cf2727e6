/**
 * Shared set-up of the API suites: registers beforeAll/afterAll that start the real API and a worker on the
 * config's task queue, and afterwards terminate the workflows a suite lists in `accepted` (its orders are
 * left open on purpose) and close every client.
 */
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { startApi, type RunningApi } from '../../src/api/main';
import type { Config } from '../../src/config';
import { connectTemporal } from '../../src/workflows/client';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { startWorker, type RunningWorker } from '../../src/worker/main';
import { connectClients, type Clients } from './helpers';
import { http, type Http } from './openapi';
import { installTestRuntime } from './temporalRuntime';

export interface AppHarness {
  clients: Clients;
  api: RunningApi;
  worker: RunningWorker;
  temporal: Client;
  /** HTTP calls to the public door (buyers' routes, the sale view and page), every response checked against openapi.yaml. */
  call: Http;
  /** The same to the internal door (payments, admin, /metrics, /readyz). */
  internal: Http;
  accepted: string[];
}

/**
 * @param log the API's logger (default: its own, at the config's LOG_LEVEL)
 * @returns the harness, whose fields are set once the suite's first beforeAll has run
 */
export function useAppHarness(config: Config, suite: string, log?: Logger): AppHarness {
  const app = { accepted: [] as string[] } as AppHarness;
  beforeAll(async () => {
    installTestRuntime();
    app.clients = connectClients(config);
    app.worker = await startWorker(config, await buildWorkflowBundle());
    app.api = await startApi(config, log);
    app.temporal = await connectTemporal(config);
    app.call = http(app.api.url);
    app.internal = http(app.api.internalUrl);
  });
  afterAll(async () => {
    await app.api?.close();
    await Promise.allSettled(app.accepted.map((id) => app.temporal.workflow.getHandle(id).terminate(`${suite} suite finished`)));
    await app.temporal?.connection.close();
    await app.worker?.shutdown();
    await app.clients?.close();
  });
  return app;
}
