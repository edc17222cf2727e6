/**
 * The Kafka broker stopped while orders are placed, paid and expire, through the stack's own script: the sale goes
 * on without it (issue: a sale froze until the broker came back). No step of an order waits for Kafka: each
 * transition queues its event in the outbox (src/order/outbox.ts), so deadlines settle, units come back and buyers
 * may buy again on time; the events follow once the broker is back, each exactly once and in its order's order,
 * none after the order's final event but the refunds that follow a refused payment.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { OrderInput } from '../../src/order/types';
import { newOrderId } from '../../src/order/orderId';
import { saleKeys } from '../../src/reservation/layout';
import { startOrderWorkflow } from '../../src/workflows/client';
import { paidSignal } from '../../src/workflows/definitions';
import { createTestSale, eventually, orderRow, reserveUnit, settledAudit, testConfig } from '../support/helpers';
import { onceInOrder } from '../support/kafka';
import { useWorkflowHarness } from '../support/workflowHarness';

const ROOT = join(__dirname, '..', '..');
const WINDOW_MS = 2000;
/** Long enough for every window to end inside it, with time to look at the stores. */
const OUTAGE_MS = 15_000;
const config = testConfig();
const harness = useWorkflowHarness(config, { api: false });
const services = (...args: string[]) => execFileSync('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], { stdio: 'ignore' });

afterAll(() => services('up'));

test('broker stopped while orders are placed, paid and expire: they settle on time, units back, buyers free; then each event once, in order', async () => {
  const { clients, temporal, tap } = harness;
  const sale = await createTestSale(clients, { quantities: [10], priceMinor: 800, paymentWindowMs: WINDOW_MS });
  const itemId = sale.items[0].itemId;
  const orders: OrderInput[] = [];
  services('stop', 'kafka');
  const stoppedAt = Date.now();
  for (let i = 0; i < 6; i++) {
    const order: OrderInput = {
      orderId: newOrderId(sale.saleId),
      saleId: sale.saleId,
      itemId,
      userId: `outage-${i}-${randomUUID().slice(0, 8)}`,
      priceMinor: 800,
      paymentWindowMs: WINDOW_MS,
      reservedAtMs: Date.now(),
    };
    orders.push(await reserveUnit(clients, order));
    await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, orders[i]);
    // Half are paid at once: decided in PostgreSQL as soon as the order has its row (the broker is not needed).
    if (i % 2 === 0) await temporal.workflow.getHandle(order.orderId).signal(paidSignal, { paymentId: `pay-${order.orderId}`, amount: 800 });
  }
  const lastDeadline = Math.max(...orders.map((o) => o.reservedAtMs + WINDOW_MS));

  // Within seconds of the last deadline, the broker still down: every order final in PostgreSQL, the unpaid ones'
  // units back in Redis and their buyers' entries cleared, so that each may buy again.
  const unpaid = orders.filter((_, i) => i % 2 === 1);
  await eventually(async () => {
    for (const [i, o] of orders.entries()) expect((await orderRow(clients.pool, o.orderId))?.status).toBe(i % 2 === 0 ? 'PAID' : 'EXPIRED');
    expect((await clients.store.view.stock(sale.saleId, [itemId])).get(itemId)).toBe(10 - 3);
    for (const o of unpaid) expect(await clients.redis.hget(saleKeys(sale.saleId).buyers, o.userId)).toBeNull();
  }, 5000);
  const settledAt = Date.now();
  expect(settledAt - lastDeadline).toBeLessThan(5000);
  expect(settledAt - stoppedAt).toBeLessThan(OUTAGE_MS);
  const again = { ...unpaid[0], orderId: newOrderId(sale.saleId), reservedAtMs: Date.now() };
  expect((await clients.store.reserve(again)).kind).toBe('RESERVED');
  // The test's own press, given back: no starter runs here to start its workflow.
  await clients.store.release(again);
  // What waits meanwhile is the orders' events, in the outbox.
  const held = await clients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM order_outbox WHERE order_id = ANY($1::uuid[])', [orders.map((o) => o.orderId)]);
  expect(held.rows[0].n).toBeGreaterThanOrEqual(orders.length * 2);

  await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + OUTAGE_MS - Date.now())));
  services('up');

  const ids = orders.map((o) => o.orderId);
  expect(await settledAudit(config, clients, temporal, sale.saleId, ids, 120_000)).toEqual([]);
  const events = await tap.collect(ids, {
    until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === ids.length,
    timeoutMs: 60_000,
  });
  expect(onceInOrder(events, ids)).toEqual([]);
}, 240_000);
