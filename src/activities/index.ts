/**
 * orderWorkflow's activities, run as local activities: each is one transition of the order (Orders, src/order/),
 * whose statement also queues its event in the outbox (the relay publishes it: no step waits for Kafka), or the
 * compensation (releaseUnit). Each may run again: it is idempotent and follows PostgreSQL's word, so a rerun
 * repeats only what PostgreSQL decided (I5). Constraint violations fail non-retryably.
 */
import { ApplicationFailure } from '@temporalio/activity';
import { isConstraintViolation } from '../infra/db';
import { orderEvent, type OrderEvent } from '../order/events';
import { receiptTime } from '../order/receipt';
import type { Orders } from '../order/store';
import type { CancelReason, CancelResult, OrderInput, Outcome, PayResult, Payment } from '../order/types';
import type { ReservationStore } from '../reservation/store';
import { activeTraceParent } from '../tracing';

/** What the activities use of the order's store and the reservations. */
export interface ActivityDeps {
  orders: Pick<Orders, 'terms' | 'stored' | 'place' | 'pay' | 'cancel' | 'settle' | 'queueEvent'>;
  reservations: Pick<ReservationStore, 'release'>;
  /** PAYMENT_RECEIPT_SECRET: payments carrying the API's receipt are judged at its stamp (src/order/receipt.ts). */
  receiptSecret?: string;
  /** When Temporal received this payment's `paid` signal (src/workflows/history.ts), for a receipt's age. */
  signalledAt?(orderId: string, payment: Payment): Promise<number | undefined>;
}

async function classified<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (isConstraintViolation(err)) {
      throw ApplicationFailure.nonRetryable((err as Error).message, 'CONSTRAINT_VIOLATION');
    }
    throw err;
  }
}

const notFound = (order: OrderInput) => ApplicationFailure.nonRetryable(`order ${order.orderId} has no row`, 'ORDER_NOT_FOUND');

/**
 * When a payment is judged (ms): its valid receipt's stamp, else when Temporal received it. A task that ran long
 * after its signal (the workers behind) would count the receipt's age to the task: the run's history says when
 * the signal arrived, and the age counts to that.
 */
function judge(receiptSecret: ActivityDeps['receiptSecret'], signalledAt: ActivityDeps['signalledAt']) {
  return async (orderId: string, payment: Payment, receivedAtMs: number): Promise<number> => {
    const stamped = receiptTime(receiptSecret, orderId, payment, receivedAtMs);
    if (stamped !== undefined || !payment.receipt || !signalledAt) return stamped ?? receivedAtMs;
    const arrived = await signalledAt(orderId, payment);
    return (arrived !== undefined ? receiptTime(receiptSecret, orderId, payment, Math.min(arrived, receivedAtMs)) : undefined) ?? receivedAtMs;
  };
}

/** @returns the activity functions registered on the worker */
export function createActivities({ orders, reservations, receiptSecret, signalledAt }: ActivityDeps) {
  const event = (type: OrderEvent['type'], order: OrderInput, extra: Parameters<typeof orderEvent>[3] = {}) => orderEvent(type, order, new Date(), extra);

  return {
    /** Orders.terms, for a workflow a payment started with the id alone. @returns null for an id naming no accepted order */
    async orderTerms(orderId: string): Promise<OrderInput | null> {
      return (await orders.terms(orderId)) ?? null;
    },

    /**
     * Places the order (Orders.place: PENDING holding its unit, I1, I3; or REJECTED; with OrderPlaced), with this
     * activity's span as its traceparent when tracing is on. A retry, or a row stored first (by the starter, before
     * the start; or PAID by the payment route), returns the stored status.
     */
    async placeOrder(order: OrderInput): Promise<Outcome> {
      // The starter stored it before the start: read it rather than insert again (which takes the epoch's lock).
      return (await orders.stored(order.orderId)) ?? (await classified(() => orders.place(order, activeTraceParent())));
    },

    /**
     * The workflow's payment step: Orders.pay (PostgreSQL decides it against the deadline, and queues OrderPaid
     * with the row). Idempotent per paymentId and amount. The order's terms are its input, so PostgreSQL alone
     * decides it: a Redis outage cannot hold a payment sent in time until its deadline has passed. The
     * workflow pays only a placed order, so the terms never store one here.
     * @param receivedAtMs when Temporal received the payment (ms): judged then, or at its valid receipt's stamp
     */
    async payOrder(order: OrderInput, payment: Payment, receivedAtMs?: number): Promise<PayResult> {
      const judgedAtMs = receivedAtMs && (await judge(receiptSecret, signalledAt)(order.orderId, payment, receivedAtMs));
      const result = await classified(() => orders.pay(order.orderId, payment, order, judgedAtMs));
      return 'error' in result ? result : { status: 'PAID', paymentId: result.paymentId };
    },

    /**
     * The workflow's cancel step: Orders.cancel (PostgreSQL decides it against payment and deadline, and queues
     * OrderCancelled with the reason it keeps; I5: again, the same answer and no second event).
     */
    async cancelOrder(order: OrderInput, reason: CancelReason): Promise<CancelResult> {
      const result = await classified(() => orders.cancel(order.orderId, reason, order));
      if (!result) throw notFound(order);
      return 'error' in result ? result : { status: 'CANCELLED', reason: result.reason };
    },

    /**
     * Settles the order once its deadline has passed by atMs, or once PostgreSQL holds it final
     * (Orders.settle: an unpaid one EXPIRED, with OrderExpired; any other read as it is, its event queued by the
     * transition that made it). Its unit is not back yet: that is releaseUnit, the workflow's next step.
     * @param atMs the workflow's clock (ms since the epoch), at or after the deadline when its timer fired
     * @returns PENDING, changing nothing, while the deadline is after atMs
     * @throws non-retryable ORDER_NOT_FOUND when the order has no row
     */
    async settleOrder(order: OrderInput, atMs: number): Promise<Outcome> {
      const settled = await classified(() => orders.settle(order, atMs));
      if (!settled) throw notFound(order);
      return settled;
    },

    /** For an order PostgreSQL would not store at all: OrderRejected queued; its unit goes back in releaseUnit. */
    async rejectUnstored(order: OrderInput, reason: string): Promise<Outcome> {
      await orders.queueEvent(event('OrderRejected', order, { reason }));
      return { status: 'REJECTED', reason };
    },

    /**
     * The compensation (I2, I4): releases the order's reservation, its unit back in stock when unitBack
     * (compensationFor says which). Idempotent (I5): a second run finds the reservation gone and frees nothing.
     * @throws ioredis ReplyError SHARD_NOT_LOADED while a shard lost its data (retried until it is rebuilt)
     */
    async releaseUnit(order: OrderInput, unitBack: boolean): Promise<void> {
      await reservations.release(order, unitBack);
    },

    /**
     * Queues one event in the outbox (the workflow's refunds): the relay publishes it, or drops a refund whose
     * payment paid an order by then. A retry may queue it twice; its eventId lets consumers drop the copy.
     */
    async publishEvent(event: OrderEvent): Promise<void> {
      await orders.queueEvent(event);
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
