/**
 * The Kafka broker stopped for longer than the publishing local activity's timeout (30 s), then started again,
 * through the stack's own script: a publish gives up within about 20 s (src/order/publisher.ts), before the activity's
 * retry sends anew, so the attempts never overlap. Afterwards every order has ended, consistently across the
 * stores (the audit), each of its events is on the topic exactly once, and none lands after the order's final
 * event (OrderPaid, OrderExpired) in its partition, but the refunds that follow a refused payment.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { OrderInput } from '../../src/order/types';
import { startOrderWorkflow } from '../../src/workflows/client';
import { paidSignal } from '../../src/workflows/definitions';
import { createTestSale, reserveUnit, settledAudit, testConfig } from '../support/helpers';
import { useWorkflowHarness } from '../support/workflowHarness';
import { newOrderId } from '../../src/order/orderId';

const ROOT = join(__dirname, '..', '..');
const OUTAGE_MS = 40_000;
const config = testConfig();
const harness = useWorkflowHarness(config, { api: false });
const services = (...args: string[]) => execFileSync('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], { stdio: 'ignore' });

afterAll(() => services('up'));

test('broker stopped for 40 s while orders are placed, paid and expire: every order ends, one copy of each event, none after its final one', async () => {
  const { clients, temporal, tap } = harness;
  const sale = await createTestSale(clients, { quantities: [10], priceMinor: 800, paymentWindowMs: 5000 });
  const orders: OrderInput[] = [];
  services('stop', 'kafka');
  const stoppedAt = Date.now();
  for (let i = 0; i < 6; i++) {
    const order: OrderInput = {
      orderId: newOrderId(sale.saleId),
      saleId: sale.saleId,
      itemId: sale.items[0].itemId,
      userId: `outage-${i}-${randomUUID().slice(0, 8)}`,
      priceMinor: 800,
      paymentWindowMs: 5000,
      reservedAtMs: Date.now(),
    };
    await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, await reserveUnit(clients, order));
    // Half are paid at once: decided in PostgreSQL as soon as the order has its row (the broker is not needed).
    if (i % 2 === 0) await temporal.workflow.getHandle(order.orderId).signal(paidSignal, { paymentId: `pay-${order.orderId}`, amount: 800 });
    orders.push(order);
  }
  // The outage's length is the scenario (every payment window ends inside it), not a wait for the workflows.
  await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + OUTAGE_MS - Date.now())));
  services('up');

  const ids = orders.map((o) => o.orderId);
  expect(await settledAudit(config, clients, temporal, sale.saleId, ids, 120_000)).toEqual([]);
  const events = await tap.collect(ids, {
    until: (es) => new Set(es.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired').map((e) => e.orderId)).size === ids.length,
    timeoutMs: 60_000,
  });
  for (const orderId of ids) {
    // One item, so one partition: the tap sees this order's events in the order the broker appended them.
    const own = events.filter((e) => e.orderId === orderId);
    const copies = new Map<string, number>();
    for (const e of own) copies.set(e.eventId, (copies.get(e.eventId) ?? 0) + 1);
    expect({ orderId, copies: [...copies].filter(([, n]) => n > 1) }).toEqual({ orderId, copies: [] });
    const finalAt = own.findIndex((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired');
    expect(finalAt).toBeGreaterThan(0);
    expect(own[0].type).toBe('OrderPlaced');
    expect(own.slice(finalAt + 1).map((e) => e.type).filter((type) => type !== 'PaymentRefundRequired')).toEqual([]);
  }
}, 240_000);
