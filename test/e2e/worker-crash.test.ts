/**
 * A worker killed mid-batch (SIGKILL: no drain, no goodbye) and replaced: every order still ends, once
 * (I4), and PostgreSQL and Redis agree (I1, I2, I5). The worker runs as its own process (`node
 * dist/worker/main.js` on a task queue of its own), as in production. Thirty orders with payment windows spread
 * over 3–9 s, half paid by signal; the kill lands when the first expiries are being compensated. While it
 * all runs, a sampler reads the item's stock and reservation count in one MULTI: their sum must stay the
 * quantity and the stock never above it (a unit released twice would push it over).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import type { OrderInput, Order } from '../../src/order/types';
import { parseReservation } from '../../src/reservation/formats';
import { saleKeys } from '../../src/reservation/layout';
import { connectTemporal, startOrderWorkflow } from '../../src/workflows/client';
import { paidSignal } from '../../src/workflows/definitions';
import { connectClients, createTestSale, testConfig, until, type Clients } from '../support/helpers';
import { openEventTap, uniqueEvents, type EventTap } from '../support/kafka';
import { newOrderId } from '../../src/order/orderId';

const ROOT = join(__dirname, '..', '..');
const ORDERS = 30;
const QUANTITY = 40;
const PRICE = 990;

const config = testConfig();
let clients: Clients;
let temporal: Client;
let tap: EventTap;
const workers: WorkerProcess[] = [];

interface WorkerProcess {
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
}

/** Starts the compiled worker (`node dist/worker/main.js`, as `npm run worker` does) in a process group of its own. */
function spawnWorker(): WorkerProcess {
  const child = spawn(process.execPath, ['dist/worker/main.js'], {
    cwd: ROOT,
    env: { ...process.env, TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE, LOG_LEVEL: 'warn' },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-20_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const worker = { child, exited, output: () => output };
  workers.push(worker);
  return worker;
}

function signalGroup(worker: WorkerProcess, signal: NodeJS.Signals): void {
  if (worker.child.pid === undefined || worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  try {
    process.kill(-worker.child.pid, signal);
  } catch {
    // Already gone.
  }
}


beforeAll(async () => {
  clients = connectClients(config);
  temporal = await connectTemporal(config);
  tap = await openEventTap(config);
});

afterAll(async () => {
  for (const worker of workers) signalGroup(worker, 'SIGTERM');
  await Promise.all(
    workers.map((worker) =>
      Promise.race([worker.exited, new Promise((resolve) => setTimeout(resolve, 20_000).unref())]).then(() => signalGroup(worker, 'SIGKILL')),
    ),
  );
  await Promise.allSettled([temporal?.connection.close(), tap?.close(), clients?.close()]);
});

async function statusCounts(saleId: number): Promise<Record<string, number>> {
  const res = await clients.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [
    saleId,
  ]);
  return Object.fromEntries(res.rows.map((r) => [r.status, r.n]));
}

test('SIGKILL of the worker mid-batch: a new worker finishes every order and PostgreSQL and Redis agree', async () => {
  const sale = await createTestSale(clients, { quantities: [QUANTITY], priceMinor: PRICE });
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);

  // Conservation sampler over the whole run (I2): reserve and release are Lua, so one MULTI sees a consistent state:
  // the free units and the units the reservations hold are the item's units 1..QUANTITY, each once.
  const violations: string[] = [];
  const units = Array.from({ length: QUANTITY }, (_, i) => i + 1);
  let maxStock = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const [[, free], [, values]] = (await clients.redis.multi().lrange(keys.stock(itemId), 0, -1).hvals(keys.reservations).exec()) as [
        [Error | null, string[]],
        [Error | null, string[]],
      ];
      maxStock = Math.max(maxStock, free.length);
      const held = values.map((value) => String(parseReservation(sale.saleId, 0, '', value).unit));
      const all = [...free, ...held].map(Number).sort((a, b) => a - b);
      if (all.length !== QUANTITY || all.some((unit, i) => unit !== units[i])) violations.push(`free units [${free}] + held units [${held}] != 1..${QUANTITY}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();

  const first = spawnWorker();
  await until('the first worker to poll', async () => {
    const described = await temporal.workflowService.describeTaskQueue({
      namespace: config.TEMPORAL_NAMESPACE,
      taskQueue: { name: config.TEMPORAL_TASK_QUEUE, kind: proto.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
      taskQueueType: proto.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    });
    return (described.pollers ?? []).length > 0;
  }, 60_000);

  const orders: OrderInput[] = [];
  const handles: WorkflowHandle[] = [];
  const signalled = new Set<string>();
  for (let i = 0; i < ORDERS; i++) {
    const order: OrderInput = {
      orderId: newOrderId(sale.saleId),
      saleId: sale.saleId,
      itemId,
      userId: `crash-${randomUUID()}`,
      priceMinor: PRICE,
      paymentWindowMs: 3000 + i * 200,
      reservedAtMs: Date.now(),
    };
    const outcome = await clients.store.reserve(order);
    if (outcome.kind !== 'RESERVED') throw new Error(`not reserved: ${outcome.kind}`);
    const held: OrderInput = { ...order, unit: outcome.unit, stockShard: outcome.stockShard, stockEpoch: outcome.stockEpoch };
    await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, held);
    const handle = temporal.workflow.getHandle(order.orderId);
    if (i % 2 === 0) {
      await handle.signal(paidSignal, { paymentId: `pay-${order.orderId}`, amount: PRICE });
      signalled.add(order.orderId);
    }
    orders.push(held);
    handles.push(handle);
  }

  // Kill when the first expiries are in PostgreSQL: others are being compensated right now.
  const atKill = await until('the first expiry', async () => {
    const counts = await statusCounts(sale.saleId);
    return (counts.EXPIRED ?? 0) > 0 && counts;
  }, 60_000);
  signalGroup(first, 'SIGKILL');
  expect((await first.exited).signal).toBe('SIGKILL');
  expect((atKill.PAID ?? 0) + (atKill.EXPIRED ?? 0) + (atKill.REJECTED ?? 0)).toBeLessThan(ORDERS);

  const second = spawnWorker();
  let results: Order[];
  try {
    results = await Promise.all(handles.map((handle) => handle.result()));
  } catch (err) {
    throw new Error(`orders did not finish: ${String(err)}\n--- second worker output ---\n${second.output()}`);
  }
  sampling = false;
  await sampler;

  // I4: every order ended, paid ones only if they were paid.
  const paid = results.filter((r) => r.status === 'PAID');
  const expired = results.filter((r) => r.status === 'EXPIRED');
  expect(paid.length + expired.length).toBe(ORDERS);
  for (const r of paid) expect(signalled.has(r.orderId)).toBe(true);
  expect(paid.length).toBeGreaterThan(0);
  expect(expired.length).toBeGreaterThanOrEqual(ORDERS - signalled.size);

  // PostgreSQL agrees with the workflows, and the live orders are exactly the paid ones, each holding its own
  // unit (I1).
  const rows = await clients.pool.query<{ id: string; status: string }>('SELECT id, status FROM orders WHERE sale_id = $1', [sale.saleId]);
  expect(Object.fromEntries(rows.rows.map((r) => [r.id, r.status]))).toEqual(Object.fromEntries(results.map((r) => [r.orderId, r.status])));
  const live = await clients.pool.query<{ sold: number; units: number }>(
    `SELECT count(*)::int AS sold, count(DISTINCT unit)::int AS units FROM orders WHERE item_id = $1 AND status IN ('PENDING', 'PAID')`,
    [itemId],
  );
  expect(live.rows[0]).toEqual({ sold: paid.length, units: paid.length });

  // Redis agrees: the paid units are held, every other one came back exactly once (I2, I5).
  expect((await clients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(QUANTITY - paid.length);
  expect((await clients.store.view.reservations(sale.saleId)).map((r) => r.orderId).sort()).toEqual(paid.map((r) => r.orderId).sort());
  expect(violations).toEqual([]);
  expect(maxStock).toBeLessThanOrEqual(QUANTITY);

  // Kafka: per order, one outcome event (copies from re-run steps dropped by eventId, as consumers do).
  const events = uniqueEvents(
    await tap.collect(
      orders.map((o) => o.orderId),
      { until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === ORDERS },
    ),
  );
  for (const r of results) {
    // A signalled order that still expired had its payment refused: the money must be refunded.
    const expected =
      r.status === 'PAID' ? ['OrderPlaced', 'OrderPaid'] : ['OrderPlaced', 'OrderExpired', ...(signalled.has(r.orderId) ? ['PaymentRefundRequired'] : [])];
    expect(events.filter((e) => e.orderId === r.orderId).map((e) => e.type).sort()).toEqual(expected.sort());
  }
}, 240_000);
