/**
 * Starter process (`npm run starter`): the starter alone, for a deployment that runs it apart from the API
 * processes (those then run with STARTER_IN_API=false). Several may run: they share the start queues' consumer
 * group, and each claims what another left behind (src/starter/starter.ts). Its metrics on STARTER_METRICS_PORT.
 * SIGINT/SIGTERM stop reading, let the starts in flight finish, then close the clients.
 */
import { once } from 'node:events';
import { loadConfig } from '../config';
import { createPool } from '../infra/db';
import { onShutdown, runMain } from '../infra/lifecycle';
import { createLogger } from '../infra/logger';
import { SaleLayouts } from '../reservation/layout';
import { ReservationStore } from '../reservation/store';
import { createRedis } from '../reservation/client';
import { OrderWorkflows } from '../workflows/client';
import { checkAtStart, reach, reachTemporal } from '../infra/startup';
import { startTracing } from '../tracing';
import { starterMetricsOf } from './metrics';
import { createStarter } from './create';

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL, 'starter');
  const tracing = startTracing(config, 'starter', log);
  const pool = createPool(config, (err) => log.warn({ err }, 'postgres idle client error'));
  const redis = createRedis(config);
  redis.on('error', (err) => log.warn({ err: err.message }, 'redis error'));
  await reach('redis', once(redis, 'ready'));
  await checkAtStart('postgres', pool.query('SELECT 1'), (line) => log.warn(line));
  const workflows = await reachTemporal(config, OrderWorkflows.connect(config));
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  const metrics = await starterMetricsOf(config);
  const starter = createStarter(config, { redis, store, pool, workflows, log }, metrics.hooks);
  metrics.readFrom(() => starter.depths());
  starter.start();
  log.info(
    { taskQueue: config.TEMPORAL_TASK_QUEUE, namespace: config.TEMPORAL_NAMESPACE, node: process.version, ...(config.STARTER_METRICS_PORT && { metrics: `${config.STARTER_METRICS_HOST}:${config.STARTER_METRICS_PORT}` }) },
    'starter running',
  );
  onShutdown(
    log,
    'shutting down: letting the starts in flight finish',
    () => starter.stop().then(() => Promise.allSettled([redis.quit(), pool.end(), workflows.close(), metrics.close()])),
    tracing,
  );
}

if (require.main === module) runMain('starter', main);
