/**
 * orderWorkflow: one execution per accepted order (workflow id = orderId) that keeps the 202's promise (I4):
 * publish OrderPlaced → persist in PostgreSQL → wait for payment up to the payment window → PAID, or
 * compensation (EXPIRED, sold − 1, unit back in Redis, OrderExpired). If PostgreSQL refuses the order it
 * ends REJECTED and the unit goes back. All I/O is in activities; time is workflow time.
 *
 * Payment and deadline race: the status leaves PENDING in the same synchronous step that reads whether a
 * payment was accepted, so a payment is either accepted (and the unit stays sold) or refused — never both.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { orderEvent, type OrderEventType, type OrderInput, type OrderStatus, type OrderView, type PayResult, type Payment } from '../domain';
import { OrderStatusKey, paidSignal, payUpdate, statusQuery } from './definitions';

// Local activities: each step is short, and running them in the worker without a server round trip per
// activity cuts the persistence writes per order several-fold (the dev server's SQLite is the bottleneck).
// They are still retried and at-least-once, so every activity stays idempotent (I5).
const activities = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
});

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
    if (payment?.paymentId === p.paymentId) return { status: 'PAID', paymentId: p.paymentId };
    if (status === 'PENDING' && payment === undefined) {
      if (p.amount !== input.priceMinor) return { error: 'AMOUNT_MISMATCH' };
      payment = p;
      return { status: 'PAID', paymentId: p.paymentId };
    }
    return { error: status === 'EXPIRED' ? 'PAYMENT_WINDOW_CLOSED' : 'ORDER_NOT_PENDING' };
  };

  setHandler(statusQuery, view);
  setHandler(payUpdate, decide, {
    validator: (p: Payment) => {
      if (typeof p?.paymentId !== 'string' || p.paymentId.length === 0 || !Number.isSafeInteger(p.amount)) {
        throw new Error('payment needs a paymentId and an integer amount in minor units');
      }
    },
  });
  setHandler(paidSignal, async (p: Payment) => {
    const result = await decide(p);
    // A signal has no answer: money that was not taken must be refunded, so say so on Kafka.
    if ('error' in result) refunds.push({ payment: p, reason: result.error });
  });

  const publish = (type: OrderEventType, extra: Parameters<typeof orderEvent>[3] = {}) =>
    activities.publishEvent(orderEvent(type, input, new Date(), extra));
  const setStatus = (next: OrderStatus) => {
    status = next;
    upsertSearchAttributes([{ key: OrderStatusKey, value: next }]);
  };

  await publish('OrderPlaced');
  let stored;
  try {
    stored = await activities.persistOrder(input, deadline);
  } catch (err) {
    if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable)) throw err;
    stored = { status: 'REJECTED' as const, reason: err.cause.type ?? 'CONSTRAINT_VIOLATION' };
  }

  if (stored.status === 'REJECTED') {
    reason = stored.reason ?? undefined;
    setStatus('REJECTED');
    await activities.releaseReservation(input.saleId, input.itemId, input.orderId);
    await publish('OrderRejected', { reason });
  } else {
    persisted = true;
    await condition(() => payment !== undefined, Math.max(0, deadlineMs - Date.now()));
    // Read and decided in one synchronous step: no handler can slip in between.
    if (payment) {
      setStatus('PAID');
      await activities.markPaid(input.orderId, payment.paymentId);
      await publish('OrderPaid', { paymentId: payment.paymentId, amount: payment.amount });
    } else {
      setStatus('EXPIRED');
      await activities.expireOrder(input.orderId);
      await activities.releaseReservation(input.saleId, input.itemId, input.orderId);
      await publish('OrderExpired');
    }
  }

  await condition(allHandlersFinished);
  for (const refund of refunds) {
    await publish('PaymentRefundRequired', { paymentId: refund.payment.paymentId, amount: refund.payment.amount, reason: refund.reason });
  }
  return view();
}
