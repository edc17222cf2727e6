/** Temporal's settings: the frontend, its TLS or API key, the task queue, and the worker's capacity. */
import { z } from 'zod';
import { checkTls, given, port, positiveMs, readableFile, tlsSwitch, type Issue, type TlsSetting } from './kinds';

export const temporalFields = {
  TEMPORAL_HOST: z.string().min(1).default('127.0.0.1'),
  TEMPORAL_PORT: port(7233),
  TEMPORAL_NAMESPACE: z.string().min(1).default('flash-sale'),
  /** TLS to the frontend: with the system's CAs, or TEMPORAL_TLS_CA_FILE's. */
  TEMPORAL_TLS: tlsSwitch,
  TEMPORAL_TLS_CA_FILE: readableFile.optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().min(1).optional(),
  /** mTLS: the client certificate and key (Temporal Cloud's certificate authentication). */
  TEMPORAL_TLS_CERT_FILE: readableFile.optional(),
  TEMPORAL_TLS_KEY_FILE: readableFile.optional(),
  /** API key (Temporal Cloud's other authentication), sent as a bearer token over TLS. */
  TEMPORAL_API_KEY: z.string().min(1).optional(),
  TEMPORAL_TASK_QUEUE: z.string().min(1).default('flash-sale-orders'),
  /** Deadline of each call the API makes to Temporal (start, describe, the pay update, readiness): past it, 503. */
  TEMPORAL_CALL_TIMEOUT_MS: positiveMs(10_000),
  WORKER_MAX_CONCURRENT_ACTIVITIES: z.coerce.number().int().min(1).max(10000).default(200),
  /**
   * Workflow tasks the worker holds at once. Their local activities and activations share one event loop and
   * one workflow thread, so more held at once only wait longer inside the worker and outlast their timeout
   * (docs/performance.md); the backlog waits in Temporal's queue instead, which has no timeout.
   */
  WORKER_MAX_CONCURRENT_WORKFLOW_TASKS: z.coerce.number().int().min(2).max(10000).default(20),
  /**
   * Workflows the worker keeps in its sticky cache. Every open order waits on its timer (a window long);
   * one evicted meanwhile is replayed from its history when it wakes (server and worker CPU), so the cache
   * holds a whole sale's orders. The SDK's default, from the heap size, is about 2,300 on a 4 GB heap.
   */
  WORKER_MAX_CACHED_WORKFLOWS: z.coerce.number().int().min(2).max(1_000_000).default(20_000),
  /** Port of the worker's Prometheus endpoint (Temporal Core's metrics: sticky cache, task latencies); 0: none. */
  WORKER_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  WORKER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
};

type Env = z.infer<z.ZodObject<typeof temporalFields>>;

/** An API key goes over TLS only, so it is a TLS setting too. */
export function temporalTls(env: Env): TlsSetting {
  const settings = given([
    ['TEMPORAL_TLS_CA_FILE', env.TEMPORAL_TLS_CA_FILE],
    ['TEMPORAL_TLS_CERT_FILE', env.TEMPORAL_TLS_CERT_FILE],
    ['TEMPORAL_TLS_KEY_FILE', env.TEMPORAL_TLS_KEY_FILE],
    ['TEMPORAL_TLS_SERVER_NAME', env.TEMPORAL_TLS_SERVER_NAME],
    ['TEMPORAL_API_KEY', env.TEMPORAL_API_KEY],
  ]);
  return { name: 'TEMPORAL_TLS', on: env.TEMPORAL_TLS, settings, hosts: [env.TEMPORAL_HOST] };
}

export function checkTemporal(env: Env, issue: Issue): void {
  checkTls(temporalTls(env), ['TEMPORAL_TLS_CERT_FILE', env.TEMPORAL_TLS_CERT_FILE, env.TEMPORAL_TLS_KEY_FILE], issue);
}
