/**
 * API process (`npm run api`): assembles the Koa app from its clients and serves it, and runs the starter that
 * starts the accepted orders' workflows (src/starter/starter.ts). SIGINT/SIGTERM stop accepting, let in-flight requests
 * finish (up to 10 s), stop the starter (its starts in flight finish), then close the clients.
 */
import cluster, { type Worker } from 'node:cluster';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { loadConfig, type Config } from '../config';
import { createPool } from '../infra/db';
import { onShutdown, runMain } from '../infra/lifecycle';
import { createLogger, type Logger } from '../infra/logger';
import { Orders } from '../order/store';
import { ReservationStore } from '../reservation/store';
import { autoPipelines, createRedis, createSubscriber, type FlashRedis } from '../reservation/client';
import { ReplicationBarrier } from '../reservation/replication';
import { SaleLayouts } from '../reservation/layout';
import { OrderWorkflows } from '../workflows/client';
import type Koa from 'koa';
import type { Pool } from 'pg';
import { createApps } from './app';
import { clientErrorResponse } from './errors';
import { Catalog } from './catalog';
import { createMetrics } from './metrics';
import { dependencyChecks } from './routes/ops';
import { Polled, STORE_READING_MS } from './polled';
import { SoldOutFlags } from './soldOut';
import { createStarter } from '../starter/create';
import { checkAtStart, reach, reachTemporal } from '../infra/startup';
import { startTracing } from '../tracing';

const DRAIN_MS = 10_000;
/** Connections the kernel holds for the API before it accepts them (listen backlog). */
const ACCEPT_BACKLOG = 4096;

export interface RunningApi {
  /** The public door's listener. */
  server: Server;
  /** The public door's base URL, e.g. http://127.0.0.1:3000 */
  url: string;
  /** The internal door's listener (admin, payments, metrics, readiness). */
  internalServer: Server;
  /** The internal door's base URL, e.g. http://127.0.0.1:3100 */
  internalUrl: string;
  close(): Promise<void>;
}

/**
 * A listener for one door, with the configured header and request timeouts and connection cap, and parser
 * refusals answered as JSON (clientErrorResponse).
 * @returns the server, listening on host:port once its 'listening' event fires ('error' when it cannot)
 */
function serve(app: Koa, config: Config, host: string, port: number): Server {
  const server = createServer(
    {
      headersTimeout: config.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
      // Node checks both timeouts on this period (30 s by default): a slow client would outstay them by that much.
      connectionsCheckingInterval: Math.min(1000, config.HTTP_HEADERS_TIMEOUT_MS),
    },
    app.callback(),
  );
  server.maxConnections = config.HTTP_MAX_CONNECTIONS;
  server.keepAliveTimeout = 65_000;
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // As Node's own handler: nothing to answer on a reset or already closed socket.
    if (err.code === 'ECONNRESET' || !socket.writable) socket.destroy();
    else socket.end(clientErrorResponse(err));
  });
  // A burst of new connections (payment notifications, buyers arriving at the sale's start) waits in the
  // kernel's accept queue while the event loop is busy; Node's default of 511 drops the excess, and each dropped
  // SYN costs its client a second before it retries. The kernel caps this at net.core.somaxconn.
  server.listen({ port, host, backlog: ACCEPT_BACKLOG });
  return server;
}

/** Stops a listener: idle connections at once, requests in flight given DRAIN_MS to finish. */
async function drain(server: Server): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const drained = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), DRAIN_MS).unref())]);
  if (!drained) server.closeAllConnections();
}

/**
 * The API's clients: PostgreSQL's pool, Redis (no offline queue: a purchase answers 503 at once while Redis is
 * down), Temporal. Auto-pipelining (one node only: autoPipelines) sends the reservations of one event-loop turn
 * in one write, where each write to an idle Redis costs a syscall and its wake-up on both sides.
 * @throws DependencyError as startApi; what was opened is closed
 */
async function connectStores(config: Config, log: Logger): Promise<{ pool: Pool; redis: FlashRedis; workflows: OrderWorkflows }> {
  const pool = createPool(config, (err) => log.warn({ err }, 'postgres idle client error'));
  const redis = createRedis(config, { enableOfflineQueue: false, enableAutoPipelining: autoPipelines(config) });
  redis.on('error', (err) => log.warn({ err: err.message }, 'redis error'));
  try {
    await reach('redis', once(redis, 'ready'));
    // Without PostgreSQL the API still answers (purchases 503 until it is back); wrongly configured, it stops.
    await checkAtStart('postgres', pool.query('SELECT 1'), (line) => log.warn(line));
    return { pool, redis, workflows: await reachTemporal(config, OrderWorkflows.connect(config)) };
  } catch (err) {
    // A failed start must not leave a Redis client reconnecting forever (and the pool open) behind it.
    redis.disconnect();
    await pool.end();
    throw err;
  }
}

/**
 * Listens on both doors. @returns the public and the internal server
 * @throws the listen error of a door that cannot open (its port taken), once both are closed
 */
async function listenOnBoth(apps: { public: Koa; internal: Koa }, config: Config): Promise<Server[]> {
  const servers = [
    serve(apps.public, config, config.API_HOST, config.API_PORT),
    serve(apps.internal, config, config.INTERNAL_API_HOST, config.INTERNAL_API_PORT),
  ];
  const failed = (await Promise.allSettled(servers.map((server) => once(server, 'listening')))).find((r) => r.status === 'rejected');
  if (failed) {
    for (const server of servers) server.close();
    throw failed.reason;
  }
  return servers;
}

/**
 * Connects the clients and listens on the public door, config.API_HOST:API_PORT, and the internal one,
 * INTERNAL_API_HOST:INTERNAL_API_PORT (port 0 picks a free one).
 * @throws DependencyError naming Redis or Temporal when one is out of reach at start, or PostgreSQL when it is
 *   wrongly configured (TLS, credentials; an outage is only logged); the clients opened so far are closed. The
 *   listen error when the port is taken.
 */
export async function startApi(config: Config, log: Logger = createLogger(config.LOG_LEVEL, 'api')): Promise<RunningApi> {
  const { pool, redis, workflows } = await connectStores(config, log);
  const barrier = config.REDIS_WAIT_REPLICAS > 0 ? new ReplicationBarrier(redis, config) : undefined;
  const store = new ReservationStore(redis, new SaleLayouts(pool), { barrier, replicas: config.REDIS_WAIT_REPLICAS, claimIdleMs: config.STARTER_CLAIM_IDLE_MS });
  const orders = new Orders(pool, store.view);
  // Its own connection: a connection in subscriber mode sends no other command.
  const restocks = createSubscriber(config);
  restocks.on('error', (err) => log.warn({ err: err.message }, 'redis error (restocked channels)'));
  const soldOut = new SoldOutFlags(store, config.SOLD_OUT_RECHECK_MS, (err) => log.warn({ err }, 'sold-out recheck failed'), restocks, config.REDIS_KEY_PREFIX);
  soldOut.start();
  // Its own client: the queue's reads must not queue behind (or ahead of) the purchases' EVALSHAs.
  const queueRedis = createRedis(config);
  queueRedis.on('error', (err) => log.warn({ err: err.message }, 'redis error (start queue)'));
  // Read on a timer from the first /readyz or scrape on, which only come once the server listens (so the starter
  // is there by then): a flood of them costs the stores nothing.
  const dependencies = new Polled(dependencyChecks({ redis, pool, workflows }), STORE_READING_MS);
  const queueDepths = new Polled(() => starter?.depths() ?? Promise.resolve(new Map()), STORE_READING_MS);
  const metrics = createMetrics(() => soldOut.size, () => queueDepths.latest(), pool, () => dependencies.latest());
  const starter = config.STARTER_IN_API
    ? createStarter(
        config,
        { redis: queueRedis, store, pool, workflows, log },
        metrics.starterHooks,
      )
    : undefined;
  const apps = await createApps({
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
    dependencies: () => dependencies.latest(),
  });
  let servers: Server[];
  try {
    servers = await listenOnBoth(apps, config);
  } catch (err) {
    soldOut.stop();
    await Promise.allSettled([redis.quit(), queueRedis.quit(), restocks.quit(), pool.end(), workflows.close()]);
    throw err;
  }
  const [url, internalUrl] = servers.map((server, i) => {
    const address = server.address();
    const host = i === 0 ? config.API_HOST : config.INTERNAL_API_HOST;
    return `http://${host}:${typeof address === 'object' && address ? address.port : 0}`;
  });
  starter?.start();
  log.info({ url, internalUrl, node: process.version }, 'api listening');
  return {
    server: servers[0],
    url,
    internalServer: servers[1],
    internalUrl,
    async close() {
      soldOut.stop();
      dependencies.stop();
      queueDepths.stop();
      await Promise.all(servers.map(drain));
      await starter?.stop();
      barrier?.close();
      await Promise.allSettled([redis.quit(), queueRedis.quit(), restocks.quit(), pool.end(), workflows.close()]);
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
  const config = loadConfig(process.env, 'api');
  const log = createLogger(config.LOG_LEVEL, 'api');
  if (config.API_PROCESSES > 1 && cluster.isPrimary) return runProcesses(config, log);
  const tracing = startTracing(config, 'api', log);
  const api = await startApi(config, log);
  onShutdown(log, 'shutting down: draining in-flight requests', () => api.close(), tracing);
}

if (require.main === module) runMain('api', main);
