/**
 * Reconciliation (I4): a reservation whose API process died between reserve and workflow start is adopted —
 * its workflow is started with the same id — and then ends like any order, returning the unit when unpaid.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { reconcileSale, type ReconcileDeps } from '../src/reconcile';
import { connectTemporal } from '../src/temporal';
import { buildWorkflowBundle, startWorker, type RunningWorker } from '../src/worker';
import { connectClients, createTestSale, testConfig, type Clients } from './helpers';

const config = testConfig();
let clients: Clients;
let temporal: Client;
let worker: RunningWorker;
let deps: ReconcileDeps;

beforeAll(async () => {
  clients = connectClients(config);
  temporal = await connectTemporal(config);
  worker = await startWorker(config, await buildWorkflowBundle());
  deps = { pool: clients.pool, store: clients.store, temporal, taskQueue: config.TEMPORAL_TASK_QUEUE, graceMs: 60_000 };
});

afterAll(async () => {
  await worker?.shutdown();
  await temporal?.connection.close();
  await clients?.close();
});

async function until<T>(probe: () => Promise<T>, done: (v: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('an orphaned reservation past the grace period is adopted once, then expires and returns its unit', async () => {
  const sale = await createTestSale(clients, { quantities: [3], paymentWindowMs: 1500 });
  const itemId = sale.items[0].itemId;
  const orphan = randomUUID();
  const fresh = randomUUID();
  const now = Date.now();
  // Two units reserved with no workflow: one "crashed" two minutes ago, one still within the grace period.
  expect((await clients.store.reserve(sale.saleId, itemId, 'crashed-buyer', orphan, now - 120_000)).kind).toBe('RESERVED');
  expect((await clients.store.reserve(sale.saleId, itemId, 'in-flight-buyer', fresh, now)).kind).toBe('RESERVED');

  const first = await reconcileSale(deps, sale.saleId, now);
  expect(first.reservations).toBe(2);
  expect(first.adopted).toEqual([orphan]);
  const again = await reconcileSale(deps, sale.saleId, now);
  expect(again.adopted).toEqual([]);

  const row = await until(
    () => clients.pool.query('SELECT status FROM orders WHERE id = $1', [orphan]),
    (r) => r.rows[0]?.status === 'EXPIRED',
  );
  expect(row.rows[0].status).toBe('EXPIRED');
  await until(
    () => temporal.workflow.getHandle(orphan).describe(),
    (d) => d.status.name === 'COMPLETED',
  );
  const stock = await clients.store.stock(sale.saleId, [itemId]);
  expect(stock.get(itemId)).toBe(2); // 3 − the fresh reservation still held; the orphan's unit is back
  const held = await clients.store.reservations(sale.saleId);
  expect(held.map((r) => r.orderId)).toEqual([fresh]);
  await expect(temporal.workflow.getHandle(fresh).describe()).rejects.toThrow();
  await clients.store.release(sale.saleId, itemId, fresh);
});
