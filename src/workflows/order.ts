/**
 * orderWorkflow: one execution per accepted order (workflow id = orderId) that keeps the 202's promise (I4):
 * store the order and publish OrderPlaced → wait for payment → PAID, or after the deadline the buyer was shown,
 * compensation (EXPIRED, sold − 1, unit back in Redis, OrderExpired). If PostgreSQL refuses the order it
 * ends REJECTED and the unit goes back. All I/O is in local activities; time is workflow time.
 *
 * Payment and deadline race: PostgreSQL decides, not this workflow. A payment (update `pay`, signal `paid`,
 * or the payment route, which writes PostgreSQL itself and then signals, or, for an order with no row yet,
 * inserts it PAID and does not: this workflow's first task finds it so) is a conditional UPDATE that needs
 * the order PENDING with its deadline ahead by PostgreSQL's clock; the expiry, run when the timer fires (at or
 * after the deadline, see below), is one that needs it PENDING (src/order/store.ts). Exactly one wins, and the
 * workflow follows the row. So a local activity that runs inside a workflow task the server refuses (a signal
 * landed meanwhile) has only done what PostgreSQL had decided, and its replay does it again, with one effect (I5).
 *
 * Two workflow tasks per order when nothing goes wrong: the first stores the order and arms the timer; the
 * second, woken by the payment or the timer, settles and completes. One when the first task finds the order
 * paid already or its deadline past; past, one local activity (placeAndSettle) places and settles it. The
 * search attribute OrderStatus is set once, to the final status, in that last task.
 */
import { ActivityFailure, ApplicationFailure, allHandlersFinished, condition, log, patched, proxyLocalActivities, setHandler, sleep, upsertSearchAttributes } from '@temporalio/workflow';
import type { Activities, Settled } from '../activities';
import { orderEvent } from '../order/events';
import { PAYMENT_ID, type OrderInput, type OrderView, type PayResult, type Payment } from '../order/types';
import { OrderStatusKey, paidSignal, payUpdate, statusQuery } from './definitions';

const retry = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' };
const local = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });

const MAX_PAYMENT_ID = 200;
/** Patch id of the late path: placeAndSettle in place of placeOrder then settleOrder. */
const PLACE_AND_SETTLE = 'place-and-settle';
/** Wait before settling again when the row's deadline is later than this workflow's (a row stored on other terms). */
const SETTLE_AGAIN_MS = 1000;

/** A payment as the payment service must send it, or why it is not one. */
function checkPayment(p: unknown): { ok: true; payment: Payment } | { ok: false; paymentId?: string } {
  const candidate = p as Partial<Payment> | null;
  const paymentId = typeof candidate?.paymentId === 'string' && candidate.paymentId.length > 0 ? candidate.paymentId.slice(0, MAX_PAYMENT_ID) : undefined;
  if (!paymentId || !PAYMENT_ID.test(candidate?.paymentId as string) || !Number.isSafeInteger(candidate?.amount) || (candidate?.amount as number) < 0) {
    return { ok: false, paymentId };
  }
  return { ok: true, payment: { paymentId, amount: candidate?.amount as number } };
}

/** @returns the final view of the order (PAID, EXPIRED or REJECTED) */
export async function orderWorkflow(input: OrderInput): Promise<OrderView> {
  // The window runs from the 202 (the reservation): the deadline the buyer is shown from then on, and the one
  // PostgreSQL enforces. The buyer can pay from the 202 on (the payment route stores the order itself if this
  // workflow has not yet), so no backlog here eats into it.
  const deadlineMs = input.reservedAtMs + input.paymentWindowMs;
  const deadline = new Date(deadlineMs).toISOString();
  let placed: Settled | undefined;
  let stored = true;
  let settled: Settled | undefined;
  const refunds: { payment: Payment; reason: string }[] = [];

  const view = (): OrderView => ({
    orderId: input.orderId,
    saleId: input.saleId,
    itemId: input.itemId,
    userId: input.userId,
    status: settled?.status ?? 'PENDING',
    priceMinor: input.priceMinor,
    deadline,
    ...(settled?.paymentId && { paymentId: settled.paymentId }),
    ...(settled?.reason && { reason: settled.reason }),
  });

  // A payment is decided once the order has its row; an accepted one settles the order (PAID) at once.
  const pay = async (p: Payment): Promise<PayResult> => {
    await condition(() => placed !== undefined);
    // An order PostgreSQL would not store has no row to pay.
    if (!stored) return { error: 'ORDER_NOT_PENDING' };
    const result = await local.payOrder(input, p);
    if ('status' in result) settled ??= { status: 'PAID', paymentId: result.paymentId };
    return result;
  };

  setHandler(statusQuery, view);
  setHandler(payUpdate, pay, {
    // Refused before it is written to history: a malformed or mispriced payment leaves no trace (I7).
    validator: (p: Payment) => {
      const checked = checkPayment(p);
      if (!checked.ok) {
        throw ApplicationFailure.nonRetryable(`payment needs a paymentId of 1-${MAX_PAYMENT_ID} printable ASCII characters and an integer amount >= 0`, 'INVALID_PAYMENT');
      }
      if (checked.payment.amount !== input.priceMinor) {
        throw ApplicationFailure.nonRetryable(`the price is ${input.priceMinor} minor units`, 'AMOUNT_MISMATCH');
      }
    },
  });
  setHandler(paidSignal, async (raw: unknown) => {
    // A signal cannot be refused on arrival, so a bad one must not fail the workflow task (that would block
    // the order forever); money that was not taken must be refunded, so say so on Kafka.
    const checked = checkPayment(raw);
    if (!checked.ok) {
      log.warn('malformed paid signal', { orderId: input.orderId, paymentId: checked.paymentId });
      if (checked.paymentId) refunds.push({ payment: { paymentId: checked.paymentId, amount: 0 }, reason: 'INVALID_PAYMENT' });
      return;
    }
    const result = await pay(checked.payment);
    if ('error' in result) refunds.push({ payment: checked.payment, reason: result.error });
  });

  // A workflow that first runs at or after its deadline (its start waited in a backlog longer than the window)
  // places and settles in one local activity. Histories written before that path existed replay the old one.
  const late = deadlineMs <= Date.now() && patched(PLACE_AND_SETTLE);
  try {
    placed = late ? await local.placeAndSettle(input, deadline, Date.now()) : await local.placeOrder(input, deadline);
    if (late && placed.status !== 'PENDING') settled = placed;
  } catch (err) {
    // PostgreSQL refused the row itself (a constraint the order cannot meet): nothing holds the unit but Redis.
    if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable)) throw err;
    stored = false;
    placed = settled = await local.rejectUnstored(input, err.cause.type ?? 'CONSTRAINT_VIOLATION');
  }
  // Payments that arrived before the order had its row are decided first: paid already, it needs no timer.
  await condition(allHandlersFinished);
  // A workflow that first runs after its deadline (a backlog) settles in this same task, without a timer. One
  // that runs before it waits one whole window from now, not just to the deadline: PostgreSQL refuses payments
  // after the deadline whenever this wakes, and a sale's deadlines all fall within its stampede's seconds, so
  // timers aimed at them fire together and bury the worker (sticky queue timeouts seen with 20,000 orders).
  // Waiting a window from the start spreads the wake-ups at the pace the starter started the workflows, which
  // is the pace the worker takes; an unpaid unit comes back up to its start-queue wait after its deadline.
  if (placed.status === 'PENDING' && !settled && deadlineMs > Date.now()) await condition(() => settled !== undefined, input.paymentWindowMs);
  while (!settled) {
    const outcome = await local.settleOrder(input, Date.now());
    if (outcome.status !== 'PENDING') settled = outcome;
    else await sleep(SETTLE_AGAIN_MS);
  }
  upsertSearchAttributes([{ key: OrderStatusKey, value: settled.status }]);

  await condition(allHandlersFinished);
  for (const refund of refunds) {
    const event = orderEvent('PaymentRefundRequired', input, new Date(), { paymentId: refund.payment.paymentId, amount: refund.payment.amount, reason: refund.reason });
    await local.publishEvent(event);
  }
  return view();
}
