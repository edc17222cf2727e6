/**
 * orderWorkflow's activities, run as local activities: each is one transition of the order (Orders, src/order/)
 * then its event on Kafka, or the compensation (releaseUnit). Each may run again: it is idempotent and follows
 * PostgreSQL's word, so a rerun repeats only what PostgreSQL decided (I5). Constraint violations fail non-retryably.
 */
import { ApplicationFailure } from '@temporalio/activity';
import { isConstraintViolation } from '../infra/db';
import { orderEvent, type OrderEvent } from '../order/events';
import type { EventPublisher } from '../order/publisher';
import type { Orders } from '../order/store';
import type { CancelReason, CancelResult, OrderInput, OrderStatus, Outcome, PayResult, Payment } from '../order/types';
import type { ReservationStore } from '../reservation/store';
import { activeTraceParent } from '../tracing';

/** What the activities use of the order's store, the event publisher and the reservations. */
export interface ActivityDeps {
  orders: Pick<Orders, 'stored' | 'place' | 'pay' | 'cancel' | 'settle'>;
  events: Pick<EventPublisher, 'publish'>;
  reservations: Pick<ReservationStore, 'release'>;
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

/** The event an order's final state is published with (none while PENDING). */
const FINAL_EVENT: Record<OrderStatus, OrderEvent['type'] | undefined> = {
  PENDING: undefined,
  PAID: 'OrderPaid',
  EXPIRED: 'OrderExpired',
  REJECTED: 'OrderRejected',
  CANCELLED: 'OrderCancelled',
};

const notFound = (order: OrderInput) => ApplicationFailure.nonRetryable(`order ${order.orderId} has no row`, 'ORDER_NOT_FOUND');

/** @returns the activity functions registered on the worker */
export function createActivities({ orders, events, reservations }: ActivityDeps) {
  const event = (type: OrderEvent['type'], order: OrderInput, extra: Parameters<typeof orderEvent>[3] = {}) => orderEvent(type, order, new Date(), extra);

  return {
    /**
     * Places the order (Orders.place: PENDING holding its unit, I1, I3; or REJECTED), with this activity's
     * span as its traceparent when tracing is on, then publishes OrderPlaced. A retry, or a row stored first
     * (by the starter, before the start; or PAID by the payment route), returns the stored status.
     */
    async placeOrder(order: OrderInput): Promise<Outcome> {
      // The starter stored it before the start: read it rather than insert again (which takes the epoch's lock).
      const placed = (await orders.stored(order.orderId)) ?? (await classified(() => orders.place(order, activeTraceParent())));
      await events.publish(event('OrderPlaced', order));
      return placed;
    },

    /**
     * The workflow's payment step: Orders.pay (PostgreSQL decides it against the deadline) and, when PAID,
     * OrderPaid. Idempotent per paymentId and amount. The order's terms are its input, so PostgreSQL alone
     * decides it: a Redis outage cannot hold a payment sent in time until its deadline has passed. The
     * workflow pays only a placed order, so the terms never store one here.
     */
    async payOrder(order: OrderInput, payment: Payment): Promise<PayResult> {
      const result = await classified(() => orders.pay(order.orderId, payment, order));
      if ('error' in result) return result;
      await events.publish(event('OrderPaid', order, { paymentId: payment.paymentId, amount: payment.amount }));
      return { status: 'PAID', paymentId: result.paymentId };
    },

    /**
     * The workflow's cancel step: Orders.cancel (PostgreSQL decides it against payment and deadline) and, when
     * CANCELLED, OrderCancelled with the reason PostgreSQL keeps (I5: again, the same answer and eventId).
     */
    async cancelOrder(order: OrderInput, reason: CancelReason): Promise<CancelResult> {
      const result = await classified(() => orders.cancel(order.orderId, reason, order));
      if (!result) throw notFound(order);
      if ('error' in result) return result;
      await events.publish(event('OrderCancelled', order, { reason: result.reason }));
      return { status: 'CANCELLED', reason: result.reason };
    },

    /**
     * Settles the order once its deadline has passed by atMs, or once PostgreSQL holds it final
     * (Orders.settle: an unpaid one EXPIRED; a cancelled one, cancelled before its workflow heard of it, read as
     * it is), then publishes its final event. Its unit is not back yet: that
     * is releaseUnit, the workflow's next step.
     * @param atMs the workflow's clock (ms since the epoch), at or after the deadline when its timer fired
     * @returns PENDING, changing nothing, while the deadline is after atMs
     * @throws non-retryable ORDER_NOT_FOUND when the order has no row
     */
    async settleOrder(order: OrderInput, atMs: number): Promise<Outcome> {
      const settled = await classified(() => orders.settle(order, atMs));
      if (!settled) throw notFound(order);
      const { priceMinor, ...outcome } = settled;
      const type = FINAL_EVENT[outcome.status];
      if (type) await events.publish(event(type, order, outcome.status === 'PAID' ? { paymentId: outcome.paymentId, amount: priceMinor } : { reason: outcome.reason }));
      return outcome;
    },

    /** For an order PostgreSQL would not store at all: OrderRejected; its unit goes back in releaseUnit. */
    async rejectUnstored(order: OrderInput, reason: string): Promise<Outcome> {
      await events.publish(event('OrderRejected', order, { reason }));
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

    /** Publishes one event (a retry may publish it twice; its eventId lets consumers drop the copy). */
    async publishEvent(event: OrderEvent): Promise<void> {
      await events.publish(event);
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
