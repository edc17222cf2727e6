/** The demo's stack: its clients, and the service's processes (API, worker, starter, the payment service's API). */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import { SaleLayouts } from '../../src/reservation/layout';
import { ReservationStore } from '../../src/reservation/store';
import { connectTemporal } from '../../src/workflows/client';
import { CROWD_IP_LIMIT } from '../../test/support/crowd';
import { freePort, startChild, type Child } from '../../test/support/processes';
import type { DemoOptions } from './types';

/** One run: its report folder, configuration, clients and processes. */
export interface Run {
  options: DemoOptions;
  dir: string;
  runId: string;
  startMs: number;
  /** Nothing waits past this (ms since the epoch). */
  hardStopMs: number;
  env: NodeJS.ProcessEnv;
  config: Config;
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  temporal: Client;
  children: Child[];
  /** The service's processes, as `name` or `name (nice N)`. */
  processes: string[];
  /** With OTEL_TRACES_EXPORTER=jsonl, each process' span file. */
  traceFiles: string[];
}

/** Where the run's processes answer. */
export interface Urls {
  baseUrl: string;
  internalUrl: string;
  paymentsUrl: string;
  workerMetricsPort: number;
}

/** Makes the report folder and connects the clients. */
export async function openRun(options: DemoOptions): Promise<Run> {
  const startMs = Date.now();
  const runId = new Date().toISOString().replace(/[:.]/g, '-');
  const dir = join(options.reportDir, `demo-${runId}`);
  mkdirSync(dir, { recursive: true });
  // The whole crowd comes from loopback: one client IP. Its limit is lifted; each buyer's stays as configured.
  // The starter runs in a process of its own unless STARTER_IN_API says otherwise: on one machine it is part of
  // the drain, which yields the CPU to the API (docs/performance.md, the payment route under a burst).
  // A receipt key of this run's own, shared by its API and workers, unless one is given (src/order/receipt.ts).
  const env = { STARTER_IN_API: 'false', PAYMENT_RECEIPT_SECRET: randomBytes(32).toString('base64url'), ...process.env, ...options.environment, API_PORT: String(options.apiPort), TEMPORAL_TASK_QUEUE: options.taskQueue, LOG_LEVEL: 'info', RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT) };
  const config = loadConfig(env);
  const pool = createPool(config);
  const redis = createRedis(config);
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  const temporal = await connectTemporal(config);
  return { options, dir, runId, startMs, hardStopMs: startMs + options.maxDurationMs, env, config, pool, redis, store, temporal, children: [], processes: [], traceFiles: [] };
}

/** Stops the processes and closes the clients. */
export async function closeRun(run: Run): Promise<void> {
  await Promise.allSettled(run.children.map((c) => c.stop()));
  await Promise.allSettled([run.pool.end(), run.redis.quit(), run.temporal.connection.close()]);
}

/** The environment of a process `name`: with spans as JSON lines, one file per process beside the logs. */
function traced(run: Run, name: string): NodeJS.ProcessEnv {
  if (run.config.OTEL_TRACES_EXPORTER !== 'jsonl') return run.env;
  run.traceFiles.push(join(run.dir, `${name}.spans.jsonl`));
  return { ...run.env, OTEL_TRACES_FILE: run.traceFiles[run.traceFiles.length - 1] };
}

/** Starts the API, the worker (niced: the drain yields the CPU to the API), the starter and the payment service's API. */
export async function startProcesses(run: Run): Promise<Urls> {
  const { config, options, dir, children } = run;
  // Its internal door (/metrics, and the payments when they share this API) on a port found free.
  const internalPort = await freePort();
  children.push(startChild('api', 'dist/api/main.js', { ...traced(run, 'api'), INTERNAL_API_PORT: String(internalPort) }, join(dir, 'api.log'), 'api listening'));
  run.processes.push(config.STARTER_IN_API ? 'api (with its starter)' : 'api', 'worker (nice 10)', ...(config.STARTER_IN_API ? [] : ['starter (nice 10)']));
  const workerMetricsPort = await freePort();
  children.push(startChild('worker', 'dist/worker/main.js', { ...traced(run, 'worker'), WORKER_METRICS_PORT: String(workerMetricsPort) }, join(dir, 'worker.log'), 'worker running', { nice: 10 }));
  if (!config.STARTER_IN_API) children.push(startChild('starter', 'dist/starter/main.js', traced(run, 'starter'), join(dir, 'starter.log'), 'starter running', { nice: 10 }));
  // The payment service's own API process: a stampede on the buyers' API does not queue its payments behind the
  // presses in one event loop (docs/deploy.md). Payments go to the internal door of that process, or of the
  // buyers' API when they share it.
  const paymentsPort = options.paymentsApi === 'own' ? await freePort() : internalPort;
  if (options.paymentsApi === 'own') {
    const paymentsEnv = { ...traced(run, 'payments-api'), API_PORT: String(await freePort()), INTERNAL_API_PORT: String(paymentsPort), STARTER_IN_API: 'false' };
    children.push(startChild('payments-api', 'dist/api/main.js', paymentsEnv, join(dir, 'payments-api.log'), 'api listening'));
    run.processes.push("the payment service's api");
  }
  await Promise.all(children.map((c) => c.ready));
  return {
    baseUrl: `http://${config.API_HOST}:${options.apiPort}`,
    internalUrl: `http://${config.INTERNAL_API_HOST}:${internalPort}`,
    paymentsUrl: `http://${config.INTERNAL_API_HOST}:${paymentsPort}`,
    workerMetricsPort,
  };
}
