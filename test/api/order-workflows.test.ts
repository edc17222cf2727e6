/**
 * The API's Temporal gateway (src/api/orderWorkflows.ts) against the real dev server: its client runs in a
 * worker thread, so these check what crosses the thread boundary (outcomes, errors the API classifies) and
 * that the request thread itself never enables an AsyncLocalStorage (the reason for the thread).
 */
import { randomUUID } from 'node:crypto';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Client } from '@temporalio/client';
import { isUnavailable } from '../../src/api/errors';
import { startOrderWorkflows, type OrderWorkflows } from '../../src/api/orderWorkflows';
import type { OrderInput } from '../../src/order/types';
import { createLogger } from '../../src/logger';
import { connectTemporal } from '../../src/temporal';
import { ItemIdKey, OrderStatusKey, SaleIdKey, UserIdKey } from '../../src/workflows/definitions';
import { recordWorkerThreads, testConfig, until } from '../helpers';

const config = testConfig({ TEMPORAL_TASK_QUEUE: `order-workflows-${randomUUID()}` });
const log = createLogger('silent', 'order-workflows-test');
let workflows: OrderWorkflows;
let temporal: Client;
const started: string[] = [];

// Jest itself runs tests in an AsyncLocalStorage, so only the Temporal client's calls count here.
const temporalRuns: string[] = [];
const run = AsyncLocalStorage.prototype.run;
jest.spyOn(AsyncLocalStorage.prototype, 'run').mockImplementation(function (this: AsyncLocalStorage<unknown>, ...args: Parameters<typeof run>) {
  const stack = new Error().stack ?? '';
  if (stack.includes('@temporalio')) temporalRuns.push(stack);
  return run.apply(this, args);
});

beforeAll(async () => {
  workflows = await startOrderWorkflows(config, log);
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  await workflows?.close();
  await Promise.allSettled(started.map((id) => temporal.workflow.getHandle(id).terminate('order-workflows suite finished')));
  await temporal?.connection.close();
  jest.restoreAllMocks();
});

function order(): OrderInput {
  const orderId = randomUUID();
  started.push(orderId);
  return { orderId, saleId: 1, itemId: 2, userId: 'buyer-ow', priceMinor: 500, paymentWindowMs: 600_000, reservedAtMs: Date.now() };
}

test('start, a second start of the same order id and a paid signal: outcomes cross the thread, the workflow carries its search attributes, and this thread enables no AsyncLocalStorage', async () => {
  temporalRuns.length = 0;
  const input = order();
  await expect(workflows.start(input)).resolves.toBe('started');
  await expect(workflows.start(input)).resolves.toBe('already-started');
  await expect(workflows.signalPaid(input.orderId, { paymentId: 'p-ow', amount: 500 })).resolves.toBe('signalled');
  await expect(workflows.checkNamespace()).resolves.toBeUndefined();
  expect(temporalRuns).toEqual([]);
  const attrs = (await temporal.workflow.getHandle(input.orderId).describe()).typedSearchAttributes;
  expect([attrs.get(UserIdKey), attrs.get(SaleIdKey), attrs.get(ItemIdKey), attrs.get(OrderStatusKey)]).toEqual(['buyer-ow', 1, 2, 'PENDING']);
});

test('an order id without a workflow: signalPaid → not-found; an unknown namespace: start and signalPaid → unavailable', async () => {
  const orderId = randomUUID();
  await expect(workflows.signalPaid(orderId, { paymentId: 'p-1', amount: 500 })).resolves.toBe('not-found');
  const elsewhere = await startOrderWorkflows(testConfig({ TEMPORAL_NAMESPACE: `no-such-namespace-${randomUUID()}` }), log);
  try {
    expect(isUnavailable(await elsewhere.start(order()).catch((e: unknown) => e))).toBe(true);
    const err = await elsewhere.signalPaid(orderId, { paymentId: 'p-1', amount: 500 }).catch((e: unknown) => e);
    expect(isUnavailable(err)).toBe(true);
  } finally {
    await elsewhere.close();
  }
});

test('a namespace that does not exist: the check rejects with the gRPC status NOT_FOUND (5) and its message', async () => {
  const broken = await startOrderWorkflows(testConfig({ TEMPORAL_NAMESPACE: `no-such-namespace-${randomUUID()}` }), log);
  try {
    await expect(broken.checkNamespace()).rejects.toMatchObject({ code: 5, message: expect.stringContaining('not found') });
  } finally {
    await broken.close();
  }
});

test('once the thread has stopped, every call rejects with an error the API answers 503', async () => {
  const stopping = await startOrderWorkflows(config, log);
  await stopping.close();
  const err = await stopping.checkNamespace().catch((e: unknown) => e);
  expect(err).toMatchObject({ name: 'ServiceError' });
  expect(isUnavailable(err)).toBe(true);
  await expect(stopping.start(order())).rejects.toMatchObject({ name: 'ServiceError' });
});

test('a client thread that dies is replaced: calls reject as unavailable meanwhile, then work again', async () => {
  const { threads: spawned, restore } = recordWorkerThreads();
  const restarting = await startOrderWorkflows(config, log);
  try {
    expect(spawned).toHaveLength(1);
    await spawned[0].terminate();
    const err = await restarting.checkNamespace().catch((e: unknown) => e);
    expect(isUnavailable(err)).toBe(true);
    const again = await until('the replacement thread answers', () =>
      restarting.checkNamespace().then(
        () => true,
        () => false,
      ),
    );
    expect(again).toBe(true);
    expect(spawned).toHaveLength(2);
    await expect(restarting.start(order())).resolves.toBe('started');
  } finally {
    await restarting.close();
    restore();
  }
});
