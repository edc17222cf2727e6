/**
 * orderWorkflow, one per accepted order (workflow id = orderId), keeps the 202's promise (I4): started by the
 * starter with the order's terms, or earlier by a payment with its id alone (its terms then read first); place; wait for
 * a payment or a cancel until the deadline the buyer was shown; settle PAID, CANCELLED or EXPIRED (REJECTED if
 * PostgreSQL will not store it); then, if unsold, the compensation as a step of its own. PostgreSQL decides
 * payment, cancel and deadline on the order's row and the workflow follows it, so a replayed local activity
 * repeats only what PostgreSQL decided (I5).
 */
import { ActivityFailure, ApplicationFailure, allHandlersFinished, condition, log, patched, proxyLocalActivities, setHandler, sleep, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { orderEvent } from '../order/events';
import {
  CANCEL_REASONS,
  compensationFor,
  isCancelReason,
  PAYMENT_ID,
  paymentDeadlineMs,
  paysPrice,
  type CancelReason,
  type CancelResult,
  type OrderInput,
  type Order,
  type Outcome,
  type PayResult,
  type Payment,
} from '../order/types';
import { cancelledSignal, cancelUpdate, OrderStatusKey, paidSignal, payUpdate, startNowSignal, statusQuery, type CancelRequest, type OrderRef } from './definitions';

const retry = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' };
const local = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });

const MAX_PAYMENT_ID = 200;
/** A receipt's MAC is 43 base64url characters (src/order/receipt.ts); anything longer is not one. */
const MAX_RECEIPT_MAC = 64;
/** Wait before settling again when PostgreSQL's clock has not reached the deadline yet (clocks of two hosts). */
const SETTLE_AGAIN_MS = 1000;

/** A payment as the payment service must send it, or why it is not one. */
function checkPayment(p: unknown): { ok: true; payment: Payment } | { ok: false; paymentId?: string } {
  const candidate = p as Partial<Payment> | null;
  const paymentId = typeof candidate?.paymentId === 'string' && candidate.paymentId.length > 0 ? candidate.paymentId.slice(0, MAX_PAYMENT_ID) : undefined;
  if (!paymentId || !PAYMENT_ID.test(candidate?.paymentId as string) || !Number.isSafeInteger(candidate?.amount) || (candidate?.amount as number) < 0) {
    return { ok: false, paymentId };
  }
  const receipt = candidate?.receipt;
  // A malformed receipt is dropped, not the payment: it is then judged when Temporal received it.
  const stamped = Number.isSafeInteger(receipt?.atMs) && typeof receipt?.mac === 'string' && receipt.mac.length <= MAX_RECEIPT_MAC;
  return { ok: true, payment: { paymentId, amount: candidate?.amount as number, ...(stamped && { receipt: { atMs: receipt?.atMs as number, mac: receipt?.mac as string } }) } };
}

/**
 * The pay update's validator: a malformed or mispriced payment is refused before history, leaving no trace (I7).
 * Before the terms are read (a run a payment started), the price is left to PostgreSQL, which answers AMOUNT_MISMATCH.
 */
function validatePayment(order: OrderInput | undefined, payment: Payment): void {
  const checked = checkPayment(payment);
  if (!checked.ok) {
    throw ApplicationFailure.nonRetryable(`payment needs a paymentId of 1-${MAX_PAYMENT_ID} printable ASCII characters and an integer amount >= 0`, 'INVALID_PAYMENT');
  }
  if (order && !paysPrice(order, checked.payment)) throw ApplicationFailure.nonRetryable(`the price is ${order.priceMinor} minor units`, 'AMOUNT_MISMATCH');
}

/** The cancel update's validator: a reason other than CancelReason's is refused before history. */
function validateCancel(request: CancelRequest): void {
  if (!isCancelReason(request?.reason)) throw ApplicationFailure.nonRetryable(`reason is one of ${CANCEL_REASONS.join(', ')}`, 'INVALID_CANCEL');
}

/**
 * @param input the order's terms (the starter), or its id alone (a payment that came first: OrderRef)
 * @returns the final view of the order (PAID, CANCELLED, EXPIRED or REJECTED)
 * @throws non-retryable ORDER_NOT_FOUND, storing nothing, when a payment started it for an id naming no accepted order
 */
export async function orderWorkflow(input: OrderInput | OrderRef): Promise<Order> {
  const orderId = input.orderId;
  const firstTaskMs = Date.now();
  let known: OrderInput | undefined = 'saleId' in input ? input : undefined;
  const terms = known ? Promise.resolve(known) : termsOf(orderId).then((read) => (known = read));
  // Set once the order has its row: payments that arrive before wait for it.
  let placed: Outcome | undefined = undefined;
  let settled: Outcome | undefined;
  const turns = new PaymentTurns();
  const refunds: { payment: Payment; reason: string }[] = [];

  // Handlers are set before the first wait: the SDK rejects an update with no handler at the end of its activation
  // (update-with-start's `pay`). A payment is decided once the order has its row; an accepted one settles it PAID.
  const pay = async (payment: Payment): Promise<PayResult> => {
    const receivedAtMs = receivedAt(firstTaskMs);
    return turns.take(patched('payments-in-arrival-order'), () => placed !== undefined, async () => {
      // An order PostgreSQL refused has no row to pay.
      if (placed?.status === 'REJECTED') return { error: 'ORDER_NOT_PENDING' };
      const result = await local.payOrder(await terms, payment, receivedAtMs);
      if ('status' in result) settled ??= { status: 'PAID', paymentId: result.paymentId };
      return result;
    });
  };
  setHandler(payUpdate, pay, { validator: (payment: Payment) => validatePayment(known, payment) });
  setHandler(paidSignal, async (raw: unknown) => {
    // A signal cannot be refused on arrival, so a bad one must not fail the workflow task (that would block
    // the order forever); money that was not taken must be refunded, so say so on Kafka.
    const checked = checkPayment(raw);
    if (!checked.ok) {
      log.warn('malformed paid signal', { orderId, paymentId: checked.paymentId });
      if (checked.paymentId) refunds.push({ payment: { paymentId: checked.paymentId, amount: 0 }, reason: 'INVALID_PAYMENT' });
      return;
    }
    const result = await pay(checked.payment);
    // A paymentId that paid another order names money that order holds: nothing to refund here.
    if ('error' in result && result.error !== 'PAYMENT_ID_USED') refunds.push({ payment: checked.payment, reason: result.error });
  });

  // A cancel is decided like a payment, once the order has its row; a CANCELLED answer settles the order at once.
  const cancel = async (reason: CancelReason): Promise<CancelResult> => {
    await condition(() => placed !== undefined);
    if (placed?.status === 'REJECTED') return { error: 'ORDER_NOT_PENDING' };
    const result = await local.cancelOrder(await terms, reason);
    if ('status' in result) settled ??= { status: 'CANCELLED', reason: result.reason };
    return result;
  };
  setHandler(cancelUpdate, (request: CancelRequest) => cancel(request.reason), { validator: validateCancel });
  setHandler(startNowSignal, () => undefined); // its delivery alone ended the start delay, if any
  setHandler(cancelledSignal, async (raw: unknown) => {
    // A signal cannot be refused on arrival: a malformed one is logged and changes nothing.
    const reason = (raw as Partial<CancelRequest> | null)?.reason;
    if (!isCancelReason(reason)) return log.warn('malformed cancelled signal', { orderId });
    await cancel(reason);
  });

  const order = await terms;
  const deadlineMs = paymentDeadlineMs(order);
  const view = () => viewOf(order, settled);
  setHandler(statusQuery, view);

  const placing = await place(order);
  placed = placing.placed;
  if (placed.status === 'PENDING') await waitForEnd(deadlineMs, () => settled !== undefined);
  // Payments being decided (one that reached the run before its deadline fired, in the same task) go first.
  if (patched('settle-after-payments')) await condition(() => turns.idle);
  settled ??= placing.unstored ? placed : await settle(order);
  const compensation = compensationFor(settled);
  if (compensation) await local.releaseUnit(order, compensation.unitBack);
  upsertSearchAttributes([{ key: OrderStatusKey, value: settled.status }]);

  await condition(allHandlersFinished);
  for (const refund of refunds) {
    const event = orderEvent('PaymentRefundRequired', order, new Date(), { paymentId: refund.payment.paymentId, amount: refund.payment.amount, reason: refund.reason });
    await local.publishEvent(event);
  }
  return view();
}

/**
 * Payments of one run, decided one at a time in the order received: a retry (a later receipt) finds its first
 * attempt's PAID rather than being refused and refunded beside it. The settle waits until none is left (idle).
 */
class PaymentTurns {
  private issued = 0;
  private done = 0;

  /** Runs work once ready() holds and, in order, every earlier payment is decided. */
  async take<T>(inOrder: boolean, ready: () => boolean, work: () => Promise<T>): Promise<T> {
    const ticket = this.issued++;
    try {
      await condition(() => ready() && (!inOrder || this.done === ticket));
      return await work();
    } finally {
      this.done += 1;
    }
  }

  get idle(): boolean {
    return this.done === this.issued;
  }
}

/** The order as the status query and the result show it: PENDING until settled. */
function viewOf(order: OrderInput, settled: Outcome | undefined): Order {
  const { orderId, saleId, itemId, userId, priceMinor } = order;
  return {
    ...{ orderId, saleId, itemId, userId },
    status: settled?.status ?? 'PENDING',
    priceMinor,
    paymentDeadline: new Date(paymentDeadlineMs(order)).toISOString(),
    ...(settled?.paymentId && { paymentId: settled.paymentId }),
    ...(settled?.reason && { reason: settled.reason }),
  };
}

/**
 * When Temporal received the payment being handled, in ms (the workflow's clock): a payment delivered in the run's
 * first workflow task arrived between the run's start and that task, however long the task waited for a worker,
 * and is judged at the start (for a payment's own signal- or update-with-start, its arrival; `startTime`, the
 * start event's, not `runStartTime`, which is the first task's); a later one at its task's start. So a payment sent in time is taken in time whatever the backlog (docs/design.md, "Payments
 * before the start").
 */
function receivedAt(firstTaskMs: number): number {
  return Date.now() === firstTaskMs ? workflowInfo().startTime.getTime() : Date.now();
}

/**
 * The terms of an order a payment started with its id alone (its search attributes come with the start, from
 * the payment client's lookup): the deadline is the one the buyer was shown, from the reservation, not from this start.
 * @throws non-retryable ORDER_NOT_FOUND when the id names no accepted order (no row, no reservation)
 */
async function termsOf(orderId: string): Promise<OrderInput> {
  const terms = await local.orderTerms(orderId);
  if (!terms) throw ApplicationFailure.nonRetryable(`order ${orderId} names no accepted order`, 'ORDER_NOT_FOUND');
  return terms;
}

/**
 * Places the order: stored PENDING holding its unit, PAID when the payment route stored it first, or REJECTED
 * by PostgreSQL (its unit held by another live order, or the buyer holds another live order).
 * @returns what PostgreSQL holds, and whether PostgreSQL refused to store the order at all (unstored: REJECTED,
 *   nothing to settle; its unit goes back in the compensation step)
 */
async function place(order: OrderInput): Promise<{ placed: Outcome; unstored: boolean }> {
  try {
    return { placed: await local.placeOrder(order), unstored: false };
  } catch (err) {
    // PostgreSQL refused the row itself (a constraint the order cannot meet): nothing holds the unit but Redis.
    // A local activity's failure reaches the workflow as the activity threw it, without an ActivityFailure
    // around it (SDK 1.24; test/workflows/order.unit.test.ts), a scheduled activity's inside one.
    const failure = err instanceof ActivityFailure ? err.cause : err;
    if (!(failure instanceof ApplicationFailure && failure.nonRetryable)) throw err;
    return { placed: await local.rejectUnstored(order, failure.type ?? 'CONSTRAINT_VIOLATION'), unstored: true };
  }
}

/**
 * Waits until the order is paid or cancelled, or its deadline has passed (a workflow that first runs after its
 * deadline does not wait). Payments and cancels that arrived before the order had its row are decided first.
 */
async function waitForEnd(deadlineMs: number, ended: () => boolean): Promise<void> {
  await condition(allHandlersFinished);
  const leftMs = deadlineMs - Date.now();
  if (leftMs > 0) await condition(ended, leftMs);
}

/**
 * Settles the order as PostgreSQL decides: PAID (OrderPaid), CANCELLED (OrderCancelled: cancelled before the
 * workflow heard of it), or past its deadline EXPIRED (OrderExpired); an unsold unit goes back in the
 * compensation step. Tried again while PostgreSQL's clock has not reached the deadline.
 */
async function settle(order: OrderInput): Promise<Outcome> {
  for (;;) {
    const outcome = await local.settleOrder(order, Date.now());
    if (outcome.status !== 'PENDING') return outcome;
    await sleep(SETTLE_AGAIN_MS);
  }
}
