/**
 * Benchmark of the accepting path: purchases that reserve a unit and start the order's workflow, over real
 * HTTP (distinct buyers, one press each), side by side in the same run with the Redis reservation alone
 * (reserve.lua through ReservationStore, same concurrency) as the baseline. Prints figures, asserts nothing.
 * Orders use a 1 s payment window and a worker runs, so every workflow it starts ends (EXPIRED) before exit.
 */
import { randomUUID } from 'node:crypto';
import { createSigner } from 'fast-jwt';
import { startApi } from '../src/api/main';
import { appendResult } from './results';
import { loadConfig } from '../src/config';
import { createPool } from '../src/db';
import { pressAll } from '../src/demo/crowd';
import { createRedis, ReservationStore } from '../src/reservations';
import { createSale, loadSale } from '../src/sales';
import { connectTemporal } from '../src/temporal';
import { buildWorkflowBundle, startWorker } from '../src/worker';

export interface AcceptFigures {
  orders: number;
  concurrency: number;
  redisReservePerS: number;
  purchasesPerS: number;
  ratio: number;
  purchaseP50Ms: number;
  purchaseP99Ms: number;
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = process.hrtime.bigint();
  const value = await work();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, value };
}

/** Runs both measurements; each sale holds exactly `orders` units so every request reserves one. */
export async function benchAccept(orders = 2000, concurrency = 100): Promise<AcceptFigures> {
  const config = loadConfig({ ...process.env, LOG_LEVEL: 'silent', API_PORT: '0', TEMPORAL_TASK_QUEUE: `bench-${randomUUID()}` });
  const pool = createPool(config);
  const redis = createRedis({ host: config.REDIS_HOST, port: config.REDIS_PORT });
  const store = new ReservationStore(redis);
  const temporal = await connectTemporal(config);
  const worker = await startWorker(config, await buildWorkflowBundle());
  const api = await startApi(config);
  const newSale = async () => {
    const now = Date.now();
    const sale = await createSale(pool, {
      name: `bench-accept-${randomUUID()}`,
      startsAt: new Date(now - 1000).toISOString(),
      endsAt: new Date(now + 3_600_000).toISOString(),
      paymentWindowMs: 1000,
      items: [{ productId: 'bench', quantity: orders, priceMinor: 100, currency: 'EUR' }],
    });
    await loadSale(pool, store, sale.saleId, false);
    return { saleId: sale.saleId, itemId: sale.items[0].itemId };
  };
  try {
    const base = await newSale();
    let next = 0;
    const redisRun = await timed(() =>
      Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < orders) {
            const i = next++;
            await store.reserve(base.saleId, base.itemId, `b${i}`, randomUUID(), Date.now());
          }
        }),
      ),
    );

    const ours = await newSale();
    const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 });
    const presses = Array.from({ length: orders }, (_, i) => ({ buyer: `b${i}`, itemId: ours.itemId, token: sign({ sub: `b${i}` }) }));
    const httpRun = await timed(() => pressAll({ baseUrl: api.url, presses, concurrency, rate: 0, deadlineMs: Date.now() + 600_000 }));
    const accepted = httpRun.value.filter((r) => r.status === 202);
    if (accepted.length !== orders) throw new Error(`expected ${orders} × 202, got ${accepted.length}`);
    const latencies = accepted.map((r) => r.latencyMs).sort((a, b) => a - b);

    // Let every started order expire so no workflow is left running without a worker.
    const until = Date.now() + 300_000;
    while ((await temporal.workflow.count(`SaleId = ${ours.saleId} AND ExecutionStatus = "Running"`)).count > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 1000));
    }
    const redisPerS = orders / (redisRun.ms / 1000);
    const purchasesPerS = orders / (httpRun.ms / 1000);
    return {
      orders,
      concurrency,
      redisReservePerS: Math.round(redisPerS),
      purchasesPerS: Math.round(purchasesPerS),
      ratio: Math.round((purchasesPerS / redisPerS) * 1000) / 1000,
      purchaseP50Ms: Math.round(latencies[Math.floor(latencies.length / 2)]),
      purchaseP99Ms: Math.round(latencies[Math.floor(latencies.length * 0.99)]),
    };
  } finally {
    await api.close();
    await worker.shutdown();
    await Promise.allSettled([pool.end(), redis.quit(), temporal.connection.close()]);
  }
}

if (require.main === module) {
  benchAccept().then(
    (f) => {
      console.log('\naccepting path: purchases (reserve + workflow start) vs Redis reserve alone');
      console.table(f);
      appendResult('accept', f);
    },
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
