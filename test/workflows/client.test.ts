/**
 * The Temporal client's order calls (src/workflows/client.ts OrderWorkflows) against the real dev server: outcomes,
 * and errors lifted so that the API answers 503 when Temporal or its namespace is away; a `paid` signal's time
 * read from the run's history (src/workflows/history.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { isUnavailable } from '../../src/api/errors';
import type { OrderInput } from '../../src/order/types';
import { connectTemporal, OrderWorkflows } from '../../src/workflows/client';
import { ItemIdKey, OrderStatusKey, SaleIdKey, UserIdKey } from '../../src/workflows/definitions';
import { paidSignalAt } from '../../src/workflows/history';
import { openRelay } from '../support/relay';
import { testConfig, until } from '../support/helpers';

const config = testConfig({ TEMPORAL_TASK_QUEUE: `order-workflows-${randomUUID()}` });
let workflows: OrderWorkflows;
let temporal: Client;
const started: string[] = [];

beforeAll(async () => {
  workflows = await OrderWorkflows.connect(config);
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  await workflows?.close();
  await Promise.allSettled(started.map((id) => temporal.workflow.getHandle(id).terminate('order-workflows suite finished')));
  await temporal?.connection.close();
});

/**
 * A sale id no sale has (negative), so that no audit of a real sale counts these workflows: the namespace is
 * shared with the suites whose sales, in a fresh database, start at id 1.
 */
const SALE_ID = -1 - Math.floor(Math.random() * 1e9);

function order(): OrderInput {
  const orderId = randomUUID();
  started.push(orderId);
  return { orderId, saleId: SALE_ID, itemId: 2, userId: 'buyer-ow', priceMinor: 500, paymentWindowMs: 600_000, reservedAtMs: Date.now() };
}

test('start, a second start of the same order id and a paid signal: their outcomes, and the workflow carries its search attributes', async () => {
  const input = order();
  await expect(workflows.start(input)).resolves.toBe('started');
  await expect(workflows.start(input)).resolves.toBe('already-started');
  await expect(workflows.signalPaid(input.orderId, { paymentId: 'p-ow', amount: 500 })).resolves.toBe('signalled');
  await expect(workflows.checkNamespace()).resolves.toBeUndefined();
  // No worker polls this suite's task queue: the order's first workflow task waits there, and the backlog says so.
  expect(await until('the first workflow task in the backlog', async () => ((await workflows.taskBacklog()) >= 1 ? true : undefined), 15_000)).toBe(true);
  const attrs = (await temporal.workflow.getHandle(input.orderId).describe()).typedSearchAttributes;
  expect([attrs.get(UserIdKey), attrs.get(SaleIdKey), attrs.get(ItemIdKey), attrs.get(OrderStatusKey)]).toEqual(['buyer-ow', SALE_ID, 2, 'PENDING']);
});

test('an order id without a workflow: signalPaid → not-found; an unknown namespace: start and signalPaid → unavailable', async () => {
  const orderId = randomUUID();
  await expect(workflows.signalPaid(orderId, { paymentId: 'p-1', amount: 500 })).resolves.toBe('not-found');
  const elsewhere = await OrderWorkflows.connect(testConfig({ TEMPORAL_NAMESPACE: `no-such-namespace-${randomUUID()}` }));
  try {
    expect(isUnavailable(await elsewhere.start(order()).catch((e: unknown) => e))).toBe(true);
    const err = await elsewhere.signalPaid(orderId, { paymentId: 'p-1', amount: 500 }).catch((e: unknown) => e);
    expect(isUnavailable(err)).toBe(true);
  } finally {
    await elsewhere.close();
  }
});

test('a namespace that does not exist: the check rejects with the gRPC status NOT_FOUND (5) and its message', async () => {
  const broken = await OrderWorkflows.connect(testConfig({ TEMPORAL_NAMESPACE: `no-such-namespace-${randomUUID()}` }));
  try {
    await expect(broken.checkNamespace()).rejects.toMatchObject({ code: 5, message: expect.stringContaining('not found') });
  } finally {
    await broken.close();
  }
});

test('a server that does not answer within TEMPORAL_CALL_TIMEOUT_MS: the call rejects as unavailable', async () => {
  // Through a relay that holds every byte once frozen: connected, then silent, as a server that stopped answering.
  const relay = await openRelay(config.TEMPORAL_HOST, config.TEMPORAL_PORT);
  const impatient = await OrderWorkflows.connect(testConfig({ TEMPORAL_PORT: String(relay.port), TEMPORAL_CALL_TIMEOUT_MS: '500' }));
  try {
    relay.freeze();
    const err = await impatient.start(order()).catch((e: unknown) => e);
    expect({ name: (err as Error).name, unavailable: isUnavailable(err), message: String(err) }).toMatchObject({ name: 'ServiceError', unavailable: true });
  } finally {
    relay.thaw();
    await impatient.close();
    await relay.close();
  }
});

test("paidSignalAt: when Temporal received a payment's first `paid` signal, from the run's history; none for a payment never signalled", async () => {
  const input = order();
  await workflows.start(input);
  const service = temporal.connection.workflowService;
  const first = { paymentId: 'p-at', amount: 500 };
  const before = Date.now();
  await workflows.signalPaid(input.orderId, first);
  const after = Date.now();
  await new Promise((r) => setTimeout(r, 1100));
  // The same payment again, another amount, another payment: the first signal's time still answers.
  await workflows.signalPaid(input.orderId, first);
  await workflows.signalPaid(input.orderId, { ...first, amount: 499 });
  await workflows.signalPaid(input.orderId, { paymentId: 'p-other', amount: 500 });
  const at = await paidSignalAt(service, config.TEMPORAL_NAMESPACE, input.orderId, first);
  // The server's clock and this one's: the same host here, within a few ms.
  expect(at).toBeGreaterThanOrEqual(before - 50);
  expect(at).toBeLessThanOrEqual(after + 50);
  const other = await paidSignalAt(service, config.TEMPORAL_NAMESPACE, input.orderId, { paymentId: 'p-other', amount: 500 });
  expect(other).toBeGreaterThan(after + 1000);
  expect(await paidSignalAt(service, config.TEMPORAL_NAMESPACE, input.orderId, { paymentId: 'p-never', amount: 500 })).toBeUndefined();
  await expect(paidSignalAt(service, config.TEMPORAL_NAMESPACE, randomUUID(), first)).rejects.toThrow(/not found/i);
});
