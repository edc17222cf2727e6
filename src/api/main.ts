/**
 * API process (`npm run api`): assembles the Koa app from its clients and serves it, and runs the starter that
 * starts the accepted orders' workflows (src/starter/starter.ts). SIGINT/SIGTERM stop accepting, let in-flight requests
 * finish (up to 10 s), stop the starter (its starts in flight finish), then close the clients.
 */
import cluster, { type Worker } from 'node:cluster';
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { loadConfig, type Config } from '../config';
import { createPool } from '../db';
import { createLogger, type Logger } from '../logger';
import { Orders } from '../order/store';
import { ReservationStore } from '../reservation/store';
import { createRedis } from '../reservation/client';
import { ReplicationBarrier } from '../reservation/replication';
import { SaleLayouts } from '../reservation/layout';
import { OrderWorkflows } from '../temporal';
import { createApp } from './app';
import { clientErrorResponse } from './errors';
import { Catalog } from './catalog';
import { createMetrics } from './metrics';
import { dependencyChecks } from './routes/ops';
import { SoldOutFlags } from './soldOut';
import { createStarter } from '../starter/starter';
import { causeOf, checkAtStart, reach, reachTemporal } from '../startup';
import { startTracing } from '../tracing';

const DRAIN_MS = 10_000;
/** Connections the kernel holds for the API before it accepts them (listen backlog). */
const ACCEPT_BACKLOG = 4096;

export interface RunningApi {
  server: Server;
  /** Base URL, e.g. http://127.0.0.1:3000 */
  url: string;
  close(): Promise<void>;
}

/**
 * Connects the clients and listens on config.API_HOST:API_PORT (port 0 picks a free one).
 * @throws DependencyError naming Redis or Temporal when one is out of reach at start, or PostgreSQL when it is
 *   wrongly configured (TLS, credentials; an outage is only logged); the clients opened so far are closed. The
 *   listen error when the port is taken.
 */
export async function startApi(config: Config, log: Logger = createLogger(config.LOG_LEVEL, 'api')): Promise<RunningApi> {
  const pool = createPool(config, (err) => log.warn({ err }, 'postgres idle client error'));
  // Fail fast when Redis is down: a purchase answers 503 rather than queueing behind reconnects. Auto-pipelining
  // sends the reservations of one event-loop turn in one write, where each write to an idle Redis costs a
  // syscall and its wake-up on both sides (docs/performance.md).
  const redis = createRedis(config, { enableOfflineQueue: false, enableAutoPipelining: true });
  redis.on('error', (err) => log.warn({ err: err.message }, 'redis error'));
  let workflows: OrderWorkflows;
  try {
    await reach('redis', once(redis, 'ready'));
    // Without PostgreSQL the API still answers (purchases 503 until it is back); wrongly configured, it stops.
    await checkAtStart('postgres', pool.query('SELECT 1'), (line) => log.warn(line));
    workflows = await reachTemporal(config, OrderWorkflows.connect(config));
  } catch (err) {
    // A failed start must not leave a Redis client reconnecting forever (and the pool open) behind it.
    redis.disconnect();
    await pool.end();
    throw err;
  }
  const barrier = config.REDIS_WAIT_REPLICAS > 0 ? new ReplicationBarrier(redis, config) : undefined;
  const store = new ReservationStore(redis, new SaleLayouts(pool), { barrier, replicas: config.REDIS_WAIT_REPLICAS, claimIdleMs: config.STARTER_CLAIM_IDLE_MS });
  const orders = new Orders(pool, store);
  const soldOut = new SoldOutFlags(store, config.SOLD_OUT_RECHECK_MS, (err) => log.warn({ err }, 'sold-out recheck failed'));
  soldOut.start();
  // Its own client: the queue's reads must not queue behind (or ahead of) the purchases' EVALSHAs.
  const queueRedis = createRedis(config);
  queueRedis.on('error', (err) => log.warn({ err: err.message }, 'redis error (start queue)'));
  // Scraped only once the server listens, so the starter is there by then.
  const metrics = createMetrics(
    () => soldOut.size,
    () => starter?.depths() ?? Promise.resolve(new Map()),
    pool,
    dependencyChecks({ redis, pool, workflows }),
  );
  const starter = config.STARTER_IN_API
    ? createStarter(
        config,
        { redis: queueRedis, store, pool, workflows, log },
        metrics.starterHooks,
      )
    : undefined;
  const app = await createApp({
    config,
    log,
    pool,
    redis,
    store,
    orders,
    workflows,
    catalog: new Catalog(pool, config.CATALOG_REFRESH_MS),
    soldOut,
    metrics,
    starter: starter ?? { notice: () => undefined },
  });
  // A burst of new connections (payment notifications, buyers arriving at the sale's start) waits in the
  // kernel's accept queue while the event loop is busy; Node's default of 511 drops the excess, and each dropped
  // SYN costs its client a second before it retries. The kernel caps this at net.core.somaxconn.
  const server = app.listen({ port: config.API_PORT, host: config.API_HOST, backlog: ACCEPT_BACKLOG });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // As Node's own handler: nothing to answer on a reset or already closed socket.
    if (err.code === 'ECONNRESET' || !socket.writable) socket.destroy();
    else socket.end(clientErrorResponse(err));
  });
  await once(server, 'listening');
  server.keepAliveTimeout = 65_000;
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.API_PORT;
  const url = `http://${config.API_HOST}:${port}`;
  starter?.start();
  log.info({ url, node: process.version }, 'api listening');
  return {
    server,
    url,
    async close() {
      soldOut.stop();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const drained = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), DRAIN_MS).unref())]);
      if (!drained) server.closeAllConnections();
      await starter?.stop();
      barrier?.close();
      await Promise.allSettled([redis.quit(), queueRedis.quit(), pool.end(), workflows.close()]);
    },
  };
}

/**
 * With API_PROCESSES > 1 this process forks that many API processes (node:cluster) that share the listening
 * socket: the primary accepts each connection and hands it to the next process in turn. Each process runs its
 * own starter (a consumer of its own in the start queues' group) and keeps its own sold-out flags, catalog and
 * rate limits. A process that dies after it listened is replaced; one that cannot start stops them all, with
 * its reason already printed. SIGINT/SIGTERM is passed on; the primary exits once every process has drained.
 */
function runProcesses(config: Config, log: Logger): void {
  let stopping = false;
  let failed = false;
  const listening = new Set<number>();
  const fork = () => cluster.fork().once('listening', function (this: Worker) {
    listening.add(this.id);
  });
  for (let i = 0; i < config.API_PROCESSES; i++) fork();
  const stop = (code: number) => {
    stopping = true;
    failed ||= code !== 0;
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
  };
  cluster.on('exit', (worker, code, signal) => {
    if (!stopping && listening.has(worker.id)) {
      log.warn({ pid: worker.process.pid, code, signal }, 'api process died; starting another');
      fork();
      return;
    }
    if (!stopping) stop(1);
    if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(failed ? 1 : 0);
  });
  process.once('SIGINT', () => stop(0));
  process.once('SIGTERM', () => stop(0));
  log.info({ processes: config.API_PROCESSES, port: config.API_PORT }, 'api processes starting');
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL, 'api');
  if (config.API_PROCESSES > 1 && cluster.isPrimary) return runProcesses(config, log);
  const tracing = startTracing(config, 'api', log);
  const api = await startApi(config, log);
  let stopping = false;
  // Ctrl-C reaches every process of the group, and the primary of API_PROCESSES passes it on too: drain once.
  const stop = () => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down: draining in-flight requests');
    void api
      .close()
      .then(() => tracing?.shutdown())
      .then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (require.main === module) {
  main().catch((err) => {
    console.error(`api cannot start: ${causeOf(err)}`);
    process.exit(1);
  });
}
