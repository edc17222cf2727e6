/**
 * `npm run reconcile`: one reconciliation pass over every recent sale (the worker also runs it every
 * RECONCILE_INTERVAL_MS). Prints per sale how many reservations it saw and which it adopted.
 */
import { loadConfig } from '../config';
import { createPool } from '../db';
import { reconcileSale, recentSaleIds } from '../reconcile';
import { createRedis, ReservationStore } from '../reservations';
import { connectTemporal } from '../temporal';

async function main(): Promise<void> {
  const config = loadConfig();
  const pool = createPool(config);
  const redis = createRedis({ host: config.REDIS_HOST, port: config.REDIS_PORT, maxRetriesPerRequest: 3 });
  const temporal = await connectTemporal(config);
  try {
    const deps = { pool, store: new ReservationStore(redis), temporal, taskQueue: config.TEMPORAL_TASK_QUEUE, graceMs: config.RECONCILE_GRACE_MS };
    for (const saleId of await recentSaleIds(pool)) {
      const result = await reconcileSale(deps, saleId);
      console.log(`sale ${saleId}: ${result.reservations} reservations, adopted ${result.adopted.length}${result.adopted.length ? `: ${result.adopted.join(', ')}` : ''}`);
    }
  } finally {
    await Promise.allSettled([pool.end(), redis.quit(), temporal.connection.close()]);
  }
}

main().catch((err) => {
  console.error(`reconcile failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
