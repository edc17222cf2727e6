/**
 * The fast layer's workflow suite: orderWorkflow's logic with mocked activities on the time-skipping test server
 * (no PostgreSQL, Redis or Kafka), so the 10-minute payment window passes in moments. Each test scripts what
 * the activities answer for its order and checks the steps the workflow took, as they ran and as its history
 * records them (one local activity marker per step): the card, compensation included — place; wait for payment
 * until the deadline; settle; if unsold, release the unit (releaseUnit) as a step of its own.
 * test/workflows/order.timeskipping.test.ts runs the same workflow with the real activities.
 */
import { randomUUID } from 'node:crypto';
import { WithStartWorkflowOperation, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Activities } from '../../src/activities';
import type { OrderEvent } from '../../src/order/events';
import type { CancelReason, CancelResult, Order, OrderInput, Outcome, PayResult, Payment } from '../../src/order/types';
import { startOrderWorkflow } from '../../src/workflows/client';
import { cancelledSignal, cancelUpdate, paidSignal, payUpdate, type OrderRef } from '../../src/workflows/definitions';
import { timeSkippingEnvironment } from '../support/temporalRuntime';

const TASK_QUEUE = 'orders-mocked';
const WINDOW_MS = 600_000;
const PRICE = 1999;

/** What the mocked activities answer for one order. */
interface Script {
  /** placeOrder's answer, or the error it throws */
  place: Outcome | Error;
  /** settleOrder's answer once the deadline has passed */
  settle: Outcome;
  pay?: (payment: Payment) => PayResult | Promise<PayResult>;
  cancel?: (reason: CancelReason) => CancelResult;
  /** orderTerms' answer, for a workflow a payment started with the order's id alone */
  terms?: OrderInput | null;
}

/** One activity call, as the workflow made it. */
interface Call {
  name: keyof Activities;
  args: unknown[];
}

const scripts = new Map<string, Script>();
const calls = new Map<string, Call[]>();

function record(orderId: string, name: keyof Activities, ...args: unknown[]): Script {
  const script = scripts.get(orderId);
  if (!script) throw new Error(`no script for order ${orderId}`);
  calls.set(orderId, [...(calls.get(orderId) ?? []), { name, args }]);
  return script;
}

const mocked: Activities = {
  async orderTerms(orderId: string): Promise<OrderInput | null> {
    const { terms } = record(orderId, 'orderTerms');
    if (terms === undefined) throw new Error('no terms scripted');
    return terms;
  },
  async placeOrder(order: OrderInput): Promise<Outcome> {
    const { place } = record(order.orderId, 'placeOrder');
    if (place instanceof Error) throw place;
    return place;
  },
  async payOrder(order: OrderInput, payment: Payment, receivedAtMs?: number): Promise<PayResult> {
    const { pay } = record(order.orderId, 'payOrder', payment, receivedAtMs);
    if (!pay) throw new Error('no payment scripted');
    return pay(payment);
  },
  async cancelOrder(order: OrderInput, reason: CancelReason): Promise<CancelResult> {
    const { cancel } = record(order.orderId, 'cancelOrder', reason);
    if (!cancel) throw new Error('no cancel scripted');
    return cancel(reason);
  },
  async settleOrder(order: OrderInput, atMs: number): Promise<Outcome> {
    return record(order.orderId, 'settleOrder', atMs).settle;
  },
  async rejectUnstored(order: OrderInput, reason: string): Promise<Outcome> {
    record(order.orderId, 'rejectUnstored', reason);
    return { status: 'REJECTED', reason };
  },
  async releaseUnit(order: OrderInput, unitBack: boolean): Promise<void> {
    record(order.orderId, 'releaseUnit', unitBack);
  },
  async publishEvent(event: OrderEvent): Promise<void> {
    record(event.orderId, 'publishEvent', event.type);
  },
};

let env: TestWorkflowEnvironment;
let bundle: WorkflowBundleWithSourceMap;
let worker: Worker;
let running: Promise<void>;

beforeAll(async () => {
  env = await timeSkippingEnvironment();
  bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: new DefaultLogger('WARN') });
  worker = await Worker.create({ connection: env.nativeConnection, taskQueue: TASK_QUEUE, workflowBundle: bundle, activities: mocked });
  running = worker.run();
}, 120_000);

afterAll(async () => {
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await env?.teardown();
});

/** Starts an order's workflow with its activities' answers scripted. */
async function start(script: Script): Promise<{ order: OrderInput; handle: WorkflowHandle }> {
  const order: OrderInput = {
    orderId: randomUUID(),
    saleId: 1,
    itemId: 1,
    userId: `buyer-${randomUUID()}`,
    priceMinor: PRICE,
    paymentWindowMs: WINDOW_MS,
    reservedAtMs: await env.currentTimeMs(),
    stockShard: 0,
    unit: 7,
  };
  scripts.set(order.orderId, script);
  await startOrderWorkflow(env.client, TASK_QUEUE, order);
  return { order, handle: env.client.workflow.getHandle(order.orderId) };
}

/** The activity calls of an order, by name (events by their type), in the order they ran. */
const steps = (order: OrderInput) => (calls.get(order.orderId) ?? []).map((c) => (c.name === 'publishEvent' ? `publishEvent:${String(c.args[0])}` : c.name));

/** The local activities the workflow's history records, by activity type, in order. */
async function historySteps(handle: WorkflowHandle): Promise<string[]> {
  const history = await handle.fetchHistory();
  return (history.events ?? []).flatMap((event) => {
    const data = event.markerRecordedEventAttributes?.details?.data?.payloads?.[0];
    if (!data) return [];
    return [defaultPayloadConverter.fromPayload<{ activity_type: string }>(data).activity_type];
  });
}

test('unpaid: placed, its payment window passes, settled EXPIRED, then compensated as a step of its own (its unit back), in its history too', async () => {
  const { order, handle } = await start({ place: { status: 'PENDING' }, settle: { status: 'EXPIRED' } });
  const result: Order = await handle.result();
  expect(result.status).toBe('EXPIRED');
  expect(steps(order)).toEqual(['placeOrder', 'settleOrder', 'releaseUnit']);
  expect(calls.get(order.orderId)?.at(-1)).toEqual({ name: 'releaseUnit', args: [true] });
  // The settle waited for the deadline the buyer was shown (the test server's clock skipped to it).
  expect(calls.get(order.orderId)?.[1].args[0]).toBeGreaterThanOrEqual(order.reservedAtMs + WINDOW_MS);
  expect(await historySteps(handle)).toEqual(['placeOrder', 'settleOrder', 'releaseUnit']);
});

test('paid before its deadline (update pay): PAID at once, no settle and no compensation', async () => {
  const { order, handle } = await start({
    place: { status: 'PENDING' },
    settle: { status: 'EXPIRED' },
    pay: (payment) => ({ status: 'PAID', paymentId: payment.paymentId }),
  });
  const paymentId = `pay-${order.orderId}`;
  expect(await handle.executeUpdate(payUpdate, { args: [{ paymentId, amount: PRICE }] })).toEqual({ status: 'PAID', paymentId });
  const result: Order = await handle.result();
  expect(result).toMatchObject({ status: 'PAID', paymentId });
  expect(steps(order)).toEqual(['placeOrder', 'payOrder']);
});

test('cancelled before its deadline (update cancel): CANCELLED at once with its reason, then compensated with its unit back', async () => {
  const { order, handle } = await start({ place: { status: 'PENDING' }, settle: { status: 'EXPIRED' }, cancel: (reason) => ({ status: 'CANCELLED', reason }) });
  expect(await handle.executeUpdate(cancelUpdate, { args: [{ reason: 'OPERATOR' }] })).toEqual({ status: 'CANCELLED', reason: 'OPERATOR' });
  const result: Order = await handle.result();
  expect(result).toMatchObject({ status: 'CANCELLED', reason: 'OPERATOR' });
  expect(steps(order)).toEqual(['placeOrder', 'cancelOrder', 'releaseUnit']);
  expect(calls.get(order.orderId)?.at(-1)).toEqual({ name: 'releaseUnit', args: [true] });
});

test('a cancel update with an unknown reason is refused before history; a malformed cancelled signal changes nothing', async () => {
  const { order, handle } = await start({ place: { status: 'PENDING' }, settle: { status: 'EXPIRED' }, cancel: (reason) => ({ status: 'CANCELLED', reason }) });
  await expect(handle.executeUpdate(cancelUpdate, { args: [{ reason: 'WHIM' as CancelReason }] })).rejects.toMatchObject({ cause: { type: 'INVALID_CANCEL' } });
  await handle.signal(cancelledSignal, { reason: 'WHIM' as CancelReason });
  await handle.signal(cancelledSignal, null as never);
  const result: Order = await handle.result();
  expect(result.status).toBe('EXPIRED');
  expect(steps(order)).toEqual(['placeOrder', 'settleOrder', 'releaseUnit']);
});

test('a cancel that lost to a payment (PostgreSQL answers ORDER_ALREADY_PAID) is answered so and settles nothing: PAID, uncompensated', async () => {
  const { order, handle } = await start({
    place: { status: 'PENDING' },
    settle: { status: 'PAID', paymentId: 'pay-first' },
    cancel: () => ({ error: 'ORDER_ALREADY_PAID' }),
  });
  expect(await handle.executeUpdate(cancelUpdate, { args: [{ reason: 'BUYER' }] })).toEqual({ error: 'ORDER_ALREADY_PAID' });
  const result: Order = await handle.result();
  expect(result).toMatchObject({ status: 'PAID', paymentId: 'pay-first' });
  expect(steps(order)).not.toContain('releaseUnit');
});

test('PostgreSQL refused it because another live order holds its unit (REJECTED SOLD_OUT): compensated, the unit kept out of stock', async () => {
  const rejected: Outcome = { status: 'REJECTED', reason: 'SOLD_OUT' };
  const { order, handle } = await start({ place: rejected, settle: rejected });
  const result: Order = await handle.result();
  expect(result).toMatchObject({ status: 'REJECTED', reason: 'SOLD_OUT' });
  expect(steps(order)).toEqual(['placeOrder', 'settleOrder', 'releaseUnit']);
  expect(calls.get(order.orderId)?.at(-1)).toEqual({ name: 'releaseUnit', args: [false] });
});

test('PostgreSQL cannot store it at all (a constraint the order cannot meet): rejectUnstored, then compensated with its unit back', async () => {
  const { order, handle } = await start({
    place: ApplicationFailure.nonRetryable('new row violates check constraint', 'CONSTRAINT_VIOLATION'),
    settle: { status: 'PENDING' },
  });
  const result: Order = await handle.result();
  expect(result).toMatchObject({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(steps(order)).toEqual(['placeOrder', 'rejectUnstored', 'releaseUnit']);
  expect(calls.get(order.orderId)?.at(-1)).toEqual({ name: 'releaseUnit', args: [true] });
});

describe('started by a payment with the order id alone (signal-with-start), before the starter', () => {
  test('its terms are read first; the deadline is the reservation’s, not the start’s; the payment settles it PAID', async () => {
    const now = await env.currentTimeMs();
    // Reserved 9 minutes ago: 1 minute of the window is left when the payment starts the workflow.
    const order: OrderInput = { orderId: randomUUID(), saleId: 1, itemId: 3, userId: `buyer-${randomUUID()}`, priceMinor: PRICE, paymentWindowMs: WINDOW_MS, reservedAtMs: now - 540_000, stockShard: 0, unit: 2 };
    scripts.set(order.orderId, { terms: order, place: { status: 'PENDING' }, settle: { status: 'PAID' }, pay: (p) => ({ status: 'PAID', paymentId: p.paymentId }) });
    const handle = await env.client.workflow.signalWithStart('orderWorkflow', {
      workflowId: order.orderId,
      taskQueue: TASK_QUEUE,
      args: [{ orderId: order.orderId } satisfies OrderRef],
      signal: paidSignal,
      signalArgs: [{ paymentId: `pay-${order.orderId}`, amount: PRICE }],
    });
    const result: Order = await handle.result();
    expect(result).toMatchObject({ status: 'PAID', paymentId: `pay-${order.orderId}`, itemId: 3, userId: order.userId, paymentDeadline: new Date(order.reservedAtMs + WINDOW_MS).toISOString() });
    expect(steps(order)).toEqual(['orderTerms', 'placeOrder', 'payOrder']);
  });

  test('pay by update-with-start: the update, sent with the start, waits for the terms and is answered PAID', async () => {
    const now = await env.currentTimeMs();
    const order: OrderInput = { orderId: randomUUID(), saleId: 1, itemId: 4, userId: `buyer-${randomUUID()}`, priceMinor: PRICE, paymentWindowMs: WINDOW_MS, reservedAtMs: now, stockShard: 0, unit: 1 };
    scripts.set(order.orderId, { terms: order, place: { status: 'PENDING' }, settle: { status: 'PAID' }, pay: (p) => ({ status: 'PAID', paymentId: p.paymentId }) });
    const startWorkflowOperation = new WithStartWorkflowOperation('orderWorkflow', {
      workflowId: order.orderId,
      taskQueue: TASK_QUEUE,
      args: [{ orderId: order.orderId } satisfies OrderRef],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    const answer = await env.client.workflow.executeUpdateWithStart(payUpdate, { args: [{ paymentId: `u-${order.orderId}`, amount: PRICE }], startWorkflowOperation });
    expect(answer).toEqual({ status: 'PAID', paymentId: `u-${order.orderId}` });
    expect(await (await startWorkflowOperation.workflowHandle()).result()).toMatchObject({ status: 'PAID', itemId: 4 });
    expect(steps(order)).toEqual(['orderTerms', 'placeOrder', 'payOrder']);
  });

  test('sent in time, handled after the deadline (no worker polled until then): judged at the run’s start, PAID', async () => {
    const lateQueue = `${TASK_QUEUE}-late`;
    const now = await env.currentTimeMs();
    // 1.5 s of the window left when the payment starts the run; the first worker polls 3 s later (the test server
    // does not skip time while a workflow task waits for a worker: these are real seconds).
    const order: OrderInput = { orderId: randomUUID(), saleId: 1, itemId: 5, userId: `buyer-${randomUUID()}`, priceMinor: PRICE, paymentWindowMs: WINDOW_MS, reservedAtMs: now - WINDOW_MS + 1500, stockShard: 0, unit: 3 };
    scripts.set(order.orderId, { terms: order, place: { status: 'PENDING' }, settle: { status: 'PAID' }, pay: (p) => ({ status: 'PAID', paymentId: p.paymentId }) });
    const handle = await env.client.workflow.signalWithStart('orderWorkflow', {
      workflowId: order.orderId,
      taskQueue: lateQueue,
      args: [{ orderId: order.orderId } satisfies OrderRef],
      signal: paidSignal,
      signalArgs: [{ paymentId: `late-${order.orderId}`, amount: PRICE }],
    });
    const startedMs = (await handle.describe()).startTime.getTime();
    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect(await env.currentTimeMs()).toBeGreaterThan(order.reservedAtMs + WINDOW_MS);
    const late = await Worker.create({ connection: env.nativeConnection, taskQueue: lateQueue, workflowBundle: bundle, activities: mocked });
    const result = await late.runUntil(handle.result());
    expect(result).toMatchObject({ status: 'PAID', paymentId: `late-${order.orderId}` });
    const paid = calls.get(order.orderId)?.find((c) => c.name === 'payOrder');
    expect(paid?.args[1]).toBe(startedMs);
    expect(startedMs).toBeLessThan(order.reservedAtMs + WINDOW_MS);
  });

  test('a payment, its retry and its deadline handled in one task (a backlog): decided one at a time, in order, before the settle: PAID, no settle', async () => {
    const backlogQueue = `${TASK_QUEUE}-backlog`;
    // 2 s of the window left once placed; then no worker polls while the payment arrives and the deadline passes.
    const order: OrderInput = { orderId: randomUUID(), saleId: 1, itemId: 6, userId: `buyer-${randomUUID()}`, priceMinor: PRICE, paymentWindowMs: WINDOW_MS, reservedAtMs: (await env.currentTimeMs()) - WINDOW_MS + 2000, stockShard: 0, unit: 4 };
    // PostgreSQL takes its time over the payment: a settle, or the payment's retry, run beside it would be decided
    // first. The retry (a later receipt) finds the first attempt's PAID only when decided after it.
    let deciding = 0;
    let mostAtOnce = 0;
    const slowPay = async (p: Payment): Promise<PayResult> => {
      mostAtOnce = Math.max(mostAtOnce, (deciding += 1));
      await new Promise((resolve) => setTimeout(resolve, 500));
      deciding -= 1;
      return { status: 'PAID', paymentId: p.paymentId };
    };
    scripts.set(order.orderId, { place: { status: 'PENDING' }, settle: { status: 'EXPIRED' }, pay: slowPay });
    await startOrderWorkflow(env.client, backlogQueue, order);
    const handle = env.client.workflow.getHandle(order.orderId);
    // No sticky queue: the next task must go to the second worker, not wait for this one's cache.
    const first = await Worker.create({ connection: env.nativeConnection, taskQueue: backlogQueue, workflowBundle: bundle, activities: mocked, maxCachedWorkflows: 0 });
    await first.runUntil(async () => {
      while (!(await historySteps(handle)).includes('placeOrder')) await new Promise((resolve) => setTimeout(resolve, 50));
    });
    await handle.signal(paidSignal, { paymentId: `backlog-${order.orderId}`, amount: PRICE, receipt: { atMs: 1, mac: 'first' } });
    await handle.signal(paidSignal, { paymentId: `backlog-${order.orderId}`, amount: PRICE, receipt: { atMs: 2, mac: 'retry' } });
    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect(await env.currentTimeMs()).toBeGreaterThan(order.reservedAtMs + WINDOW_MS);
    const second = await Worker.create({ connection: env.nativeConnection, taskQueue: backlogQueue, workflowBundle: bundle, activities: mocked });
    expect(await second.runUntil(handle.result())).toMatchObject({ status: 'PAID', paymentId: `backlog-${order.orderId}` });
    expect(steps(order)).toEqual(['placeOrder', 'payOrder', 'payOrder']);
    expect(calls.get(order.orderId)?.filter((c) => c.name === 'payOrder').map((c) => (c.args[0] as Payment).receipt?.mac)).toEqual(['first', 'retry']);
    expect(mostAtOnce).toBe(1);
  });

  test('an id naming no accepted order: the run fails ORDER_NOT_FOUND having stored nothing and released nothing', async () => {
    const orderId = randomUUID();
    scripts.set(orderId, { terms: null, place: new Error('must not place'), settle: { status: 'EXPIRED' } });
    const handle = await env.client.workflow.signalWithStart('orderWorkflow', {
      workflowId: orderId,
      taskQueue: TASK_QUEUE,
      args: [{ orderId } satisfies OrderRef],
      signal: paidSignal,
      signalArgs: [{ paymentId: `forged-${orderId}`, amount: PRICE }],
    });
    await expect(handle.result()).rejects.toMatchObject({ cause: { type: 'ORDER_NOT_FOUND' } });
    expect((calls.get(orderId) ?? []).map((c) => c.name)).toEqual(['orderTerms']);
  });
});
