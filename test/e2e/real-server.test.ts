/**
 * Orders on the real Temporal server (`services.sh up --temporal-server`: frontend, history, matching and
 * worker as four processes, PostgreSQL persistence and SQL visibility), reached by configuration alone
 * (TEMPORAL_PORT): the production worker runs one order that is paid through the `pay` update, one that expires
 * and is compensated, and one that PostgreSQL refuses (its unit held by another live order: REJECTED), and the
 * operators' search attributes answer visibility queries on the server's PostgreSQL visibility store, and in its
 * Web UI (Temporal's UI server, which services.sh builds and starts beside it).
 */
import { randomUUID } from 'node:crypto';
import type { WorkflowExecutionInfo } from '@temporalio/client';
import { newOrderId } from '../../src/order/orderId';
import type { OrderInput } from '../../src/order/types';
import type { Sale } from '../../src/sale/sales';
import { startOrderWorkflow } from '../../src/workflows/client';
import { payUpdate } from '../../src/workflows/definitions';
import { stackEnv } from '../../scripts/stack-env';
import { prepareEnvironment } from '../support/environment';
import { createTestSale, eventually, orderResult, reserveUnit, testConfig } from '../support/helpers';
import { useWorkflowHarness } from '../support/workflowHarness';

jest.setTimeout(120_000);

const PRICE = 2500;
const WINDOW_MS = 3000;
const overrides = { TEMPORAL_PORT: stackEnv().TEMPORAL_SERVER_PORT };
const config = testConfig(overrides);

// The suites' namespace and search attributes on the real server too (the global set-up prepares the dev server's).
beforeAll(() => prepareEnvironment({ ...process.env, ...overrides }), 120_000);
const harness = useWorkflowHarness(config, { api: false });

/** An order of the sale with its unit reserved in Redis, as the purchase route leaves it. */
async function reserved(sale: Sale, userId: string): Promise<OrderInput> {
  const item = sale.items[0];
  const order = { orderId: newOrderId(sale.saleId), saleId: sale.saleId, itemId: item.itemId, userId, priceMinor: item.priceMinor, paymentWindowMs: sale.paymentWindowMs, reservedAtMs: Date.now() };
  return reserveUnit(harness.clients, order);
}

async function listed(query: string): Promise<WorkflowExecutionInfo[]> {
  const out: WorkflowExecutionInfo[] = [];
  for await (const info of harness.temporal.workflow.list({ query })) out.push(info);
  return out;
}

test('the server is the real one: PostgreSQL persistence and visibility, the configured history shards', async () => {
  const info = await harness.temporal.workflowService.getClusterInfo({});
  expect({ persistence: info.persistenceStore, visibility: info.visibilityStore, shards: info.historyShardCount }).toEqual({
    persistence: 'postgres12',
    visibility: 'postgres12',
    shards: Number(stackEnv().TEMPORAL_SERVER_HISTORY_SHARDS),
  });
});

test('paid, expired and rejected orders end on the real server, and their search attributes are queryable', async () => {
  const { clients, temporal } = harness;
  const sale = await createTestSale(clients, { quantities: [5], priceMinor: PRICE, paymentWindowMs: WINDOW_MS });
  const run = randomUUID().slice(0, 8);
  const [paying, expiring, refused] = await Promise.all(['paid', 'expired', 'rejected'].map((kind) => reserved(sale, `real-${kind}-${run}`)));
  // Another buyer's live order holds, in PostgreSQL, the unit Redis gave `refused`: PostgreSQL refuses it (I1).
  await clients.orders.place({ ...refused, orderId: newOrderId(sale.saleId), userId: `holder-${run}` });

  for (const order of [paying, expiring, refused]) await startOrderWorkflow(temporal, config.TEMPORAL_TASK_QUEUE, order);
  const payment = { paymentId: `pay-${paying.orderId}`, amount: PRICE };
  expect(await temporal.workflow.getHandle(paying.orderId).executeUpdate(payUpdate, { args: [payment] })).toEqual({ status: 'PAID', paymentId: payment.paymentId });

  const results = await Promise.all([paying, expiring, refused].map((o) => orderResult(temporal, o.orderId)));
  expect(results.map((r) => [r.status, r.reason])).toEqual([
    ['PAID', undefined],
    ['EXPIRED', undefined],
    ['REJECTED', 'SOLD_OUT'],
  ]);

  // The operators' queries, on each search attribute.
  const ids = (infos: WorkflowExecutionInfo[]) => infos.map((i) => i.workflowId).sort();
  await eventually(async () => {
    expect(ids(await listed(`SaleId = ${sale.saleId} AND ExecutionStatus = 'Completed'`))).toEqual([paying.orderId, expiring.orderId, refused.orderId].sort());
  });
  for (const [status, order] of [['PAID', paying], ['EXPIRED', expiring], ['REJECTED', refused]] as const) {
    expect(ids(await listed(`SaleId = ${sale.saleId} AND OrderStatus = '${status}'`))).toEqual([order.orderId]);
  }
  expect(ids(await listed(`ItemId = ${sale.items[0].itemId} AND UserId = '${expiring.userId}'`))).toEqual([expiring.orderId]);
  const [info] = await listed(`WorkflowId = '${paying.orderId}'`);
  expect(info.searchAttributes).toMatchObject({ OrderStatus: ['PAID'], SaleId: [sale.saleId], ItemId: [sale.items[0].itemId], UserId: [paying.userId] });

  // And in its Web UI (Temporal's UI server), as an operator searches there: the page, and its list of orders.
  const ui = `http://127.0.0.1:${stackEnv().TEMPORAL_SERVER_UI_PORT}`;
  expect((await fetch(`${ui}/`)).headers.get('content-type')).toMatch(/text\/html/);
  const query = encodeURIComponent(`SaleId = ${sale.saleId} AND OrderStatus = 'EXPIRED'`);
  const page = (await (await fetch(`${ui}/api/v1/namespaces/${config.TEMPORAL_NAMESPACE}/workflows?query=${query}`)).json()) as { executions?: { execution: { workflowId: string } }[] };
  expect(page.executions?.map((e) => e.execution.workflowId)).toEqual([expiring.orderId]);

  // The compensation ran on this server too: the expired order's unit is back in stock; the refused order's
  // unit stays out (the holder has it). 5 units: the paid one and the held one are out.
  expect((await clients.store.view.stock(sale.saleId, [sale.items[0].itemId])).get(sale.items[0].itemId)).toBe(3);
});
