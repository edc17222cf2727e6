/**
 * orderWorkflow: one execution per accepted order (workflow id = orderId) that keeps the 202's promise (I4):
 * publish OrderPlaced → persist in PostgreSQL → wait for payment up to the payment window → PAID, or
 * compensation (EXPIRED, sold − 1, unit back in Redis, OrderExpired). If PostgreSQL refuses the order it
 * ends REJECTED and the unit goes back. All I/O is in activities; time is workflow time.
 *
 * Payment and deadline race: the status leaves PENDING in the same synchronous step that reads whether a
 * payment was accepted, so a payment is either accepted (and the unit stays sold) or refused — never both.
 * The side effects of that decision run as regular activities, scheduled by the workflow task that records
 * the decision: if a signal lands while that task runs, the server refuses the task, nothing has happened
 * yet, and the replay decides again with the signal in view. (As local activities they would already have
 * run inside the refused task.)
 */
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  log,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { orderEvent, type OrderEventType, type OrderInput, type OrderStatus, type OrderView, type PayResult, type Payment } from '../domain';
import { OrderStatusKey, paidSignal, payUpdate, statusQuery } from './definitions';

const retry = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' };
// Steps before any decision (publish OrderPlaced, persist, release of a rejected order) are short and
// repeatable, so they run as local activities: no server round trip each, which is where the dev server's
// single SQLite writer spends its time.
const local = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });
const settled = proxyActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });

const MAX_PAYMENT_ID = 200;

/** A payment as the payment service must send it, or why it is not one. */
function checkPayment(p: unknown): { ok: true; payment: Payment } | { ok: false; paymentId?: string } {
  const candidate = p as Partial<Payment> | null;
  const paymentId = typeof candidate?.paymentId === 'string' && candidate.paymentId.length > 0 ? candidate.paymentId.slice(0, MAX_PAYMENT_ID) : undefined;
  if (!paymentId || candidate?.paymentId !== paymentId || !Number.isSafeInteger(candidate?.amount) || (candidate?.amount as number) < 0) {
    return { ok: false, paymentId };
  }
  return { ok: true, payment: { paymentId, amount: candidate.amount as number } };
}

/** @returns the final view of the order (PAID, EXPIRED or REJECTED) */
export async function orderWorkflow(input: OrderInput): Promise<OrderView> {
  // The window runs from when the workflow first runs, which is at or after the 202: a buyer never gets less
  // than the promised window, and a backlogged worker does not eat into it.
  const deadlineMs = Date.now() + input.paymentWindowMs;
  const deadline = new Date(deadlineMs).toISOString();
  let status: OrderStatus = 'PENDING';
  let persisted = false;
  let payment: Payment | undefined;
  let reason: string | undefined;
  const refunds: { payment: Payment; reason: string }[] = [];

  const view = (): OrderView => ({
    orderId: input.orderId,
    saleId: input.saleId,
    itemId: input.itemId,
    userId: input.userId,
    status,
    priceMinor: input.priceMinor,
    deadline,
    ...(payment && { paymentId: payment.paymentId }),
    ...(reason && { reason }),
  });

  // Decides a payment synchronously against the current status; waits only until the order is in PostgreSQL,
  // so that a payment never races the insert.
  const decide = async (p: Payment): Promise<PayResult> => {
    await condition(() => persisted || status !== 'PENDING');
    if (payment !== undefined && payment.paymentId === p.paymentId) return { status: 'PAID', paymentId: p.paymentId };
    if (status === 'PENDING' && payment === undefined) {
      if (p.amount !== input.priceMinor) return { error: 'AMOUNT_MISMATCH' };
      payment = p;
      return { status: 'PAID', paymentId: p.paymentId };
    }
    return { error: status === 'EXPIRED' ? 'PAYMENT_WINDOW_CLOSED' : 'ORDER_NOT_PENDING' };
  };

  setHandler(statusQuery, view);
  setHandler(payUpdate, decide, {
    // Refused before it is written to history: a malformed or mispriced payment leaves no trace (I7).
    validator: (p: Payment) => {
      const checked = checkPayment(p);
      if (!checked.ok) {
        throw ApplicationFailure.nonRetryable(`payment needs a paymentId of 1-${MAX_PAYMENT_ID} characters and an integer amount >= 0`, 'INVALID_PAYMENT');
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
    const result = await decide(checked.payment);
    if ('error' in result) refunds.push({ payment: checked.payment, reason: result.error });
  });

  const event = (type: OrderEventType, extra: Parameters<typeof orderEvent>[3] = {}) => orderEvent(type, input, new Date(), extra);
  const setStatus = (next: OrderStatus) => {
    status = next;
    upsertSearchAttributes([{ key: OrderStatusKey, value: next }]);
  };

  await local.publishEvent(event('OrderPlaced'));
  let stored;
  try {
    stored = await local.persistOrder(input, deadline);
  } catch (err) {
    if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable)) throw err;
    stored = { status: 'REJECTED' as const, reason: err.cause.type ?? 'CONSTRAINT_VIOLATION' };
  }

  if (stored.status === 'REJECTED') {
    reason = stored.reason ?? undefined;
    setStatus('REJECTED');
    await local.releaseReservation(input.saleId, input.itemId, input.orderId);
    await local.publishEvent(event('OrderRejected', { reason }));
  } else {
    persisted = true;
    await condition(() => payment !== undefined, Math.max(0, deadlineMs - Date.now()));
    // Read and decided in one synchronous step: no handler can slip in between.
    if (payment) {
      const paid: Payment = payment;
      setStatus('PAID');
      const storedPaymentId = await settled.settlePaid(input.orderId, paid.paymentId, event('OrderPaid', { paymentId: paid.paymentId, amount: paid.amount }));
      if (storedPaymentId !== paid.paymentId) refunds.push({ payment: paid, reason: 'ORDER_NOT_PENDING' });
    } else {
      setStatus('EXPIRED');
      await settled.compensate(input.saleId, input.itemId, input.orderId, event('OrderExpired'));
    }
  }

  await condition(allHandlersFinished);
  for (const refund of refunds) {
    await settled.publishEvent(event('PaymentRefundRequired', { paymentId: refund.payment.paymentId, amount: refund.payment.amount, reason: refund.reason }));
  }
  return view();
}
