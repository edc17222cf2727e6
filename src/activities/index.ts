/**
 * Activities of orderWorkflow: thin, typed, built from injected clients (PostgreSQL pool, Redis reservation
 * store, Kafka publisher). The workflow runs them as local activities, so each may run more than once, and
 * inside a workflow task the server may refuse: each is idempotent (I5), and each follows PostgreSQL's word
 * rather than the workflow's, so a re-run can only repeat what PostgreSQL already decided. PostgreSQL
 * constraint violations are business outcomes and fail non-retryably; connection errors are retried.
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Pool } from 'pg';
import { isConstraintViolation } from '../db';
import { orderEvent, type OrderEvent } from '../order/events';
import type { OrderInput, OrderStatus, PayResult, Payment } from '../order/types';
import type { EventPublisher } from '../order/publisher';
import * as orders from '../order/store';
import type { ReservationStore } from '../reservation/store';

export interface ActivityDeps {
  pool: Pool;
  store: ReservationStore;
  events: EventPublisher;
}

/** Where an order ended, as PostgreSQL holds it; PENDING while its deadline is still ahead. */
export interface Settled {
  status: OrderStatus;
  paymentId?: string;
  reason?: string;
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

/** @returns the activity functions registered on the worker */
export function createActivities({ pool, store, events }: ActivityDeps) {
  const event = (type: OrderEvent['type'], order: OrderInput, extra: Parameters<typeof orderEvent>[3] = {}) => orderEvent(type, order, new Date(), extra);

  /**
   * Brings Redis and Kafka in line with a final status PostgreSQL holds: the unit back unless PAID, then the
   * event, sent after `before` in the same request.
   */
  const follow = async (order: OrderInput, settlement: orders.Settlement, before: OrderEvent[] = []): Promise<Settled> => {
    const { status } = settlement;
    const paymentId = settlement.paymentId ?? undefined;
    const reason = settlement.reason ?? undefined;
    if (status === 'PAID') await events.publishAll([...before, event('OrderPaid', order, { paymentId, amount: settlement.priceMinor })]);
    if (status === 'EXPIRED' || status === 'REJECTED') {
      await store.release(order.saleId, order.itemId, order.orderId);
      await events.publishAll([...before, status === 'EXPIRED' ? event('OrderExpired', order) : event('OrderRejected', order, { reason })]);
    }
    return { status, ...(paymentId && { paymentId }), ...(reason && { reason }) };
  };

  /** settleOrder's work, with `before` published ahead of its event (or alone, when it stays PENDING). */
  const settle = async (order: OrderInput, atMs: number, before: OrderEvent[] = []): Promise<Settled> => {
    const settlement = await classified(() => orders.expireOrder(pool, order.orderId, atMs));
    if (!settlement) throw ApplicationFailure.nonRetryable(`order ${order.orderId} has no row`, 'ORDER_NOT_FOUND');
    if (settlement.status !== 'PENDING') return follow(order, settlement, before);
    if (before.length) await events.publishAll(before);
    return { status: 'PENDING' };
  };

  return {
    /**
     * Stores the order PENDING and counted in `sold` (I1, I3), or REJECTED when PostgreSQL says no, then
     * publishes OrderPlaced. A retry, or a row the payment route stored first, returns the stored status.
     * @param deadline ISO-8601 end of the payment window
     */
    async placeOrder(order: OrderInput, deadline: string): Promise<Settled> {
      const stored = await classified(() => orders.persistOrder(pool, order, new Date(deadline)));
      await events.publish(event('OrderPlaced', order));
      return { status: stored.status, ...(stored.reason && { reason: stored.reason }) };
    },

    /**
     * placeOrder and settleOrder in one, for a workflow that first runs at or after the order's deadline (its
     * start waited in a backlog longer than the payment window): stores the order (or finds the row the
     * payment route stored), then settles it as settleOrder does, with OrderPlaced and the final event in one
     * Kafka request. One local activity instead of two for each order of such a backlog.
     * @param deadline ISO-8601 end of the payment window
     * @param atMs the workflow's clock (ms since the epoch), at or after the deadline
     * @returns the settled order; PENDING, placed and otherwise unchanged, while the row's deadline is after atMs
     */
    async placeAndSettle(order: OrderInput, deadline: string, atMs: number): Promise<Settled> {
      await classified(() => orders.persistOrder(pool, order, new Date(deadline)));
      return settle(order, atMs, [event('OrderPlaced', order)]);
    },

    /**
     * Decides a payment in PostgreSQL (orders.payOrder: the arbiter of payment against deadline) and, when it
     * is PAID, settles the order (OrderPaid). Idempotent per paymentId.
     * @throws non-retryable ORDER_NOT_FOUND when the order has no row (the workflow waits for placeOrder first)
     */
    async payOrder(order: OrderInput, payment: Payment): Promise<PayResult> {
      const result = await classified(() => orders.payOrder(pool, order.orderId, payment.paymentId, payment.amount));
      if (!result) throw ApplicationFailure.nonRetryable(`order ${order.orderId} has no row`, 'ORDER_NOT_FOUND');
      if ('status' in result) await events.publish(event('OrderPaid', order, { paymentId: payment.paymentId, amount: payment.amount }));
      return result;
    },

    /**
     * Settles the order once its deadline has passed by atMs, or once PostgreSQL holds it final: compensation
     * for an unpaid one (EXPIRED and sold − 1 in one statement, the unit back in Redis, OrderExpired; I4), the
     * unit back and OrderRejected for a REJECTED one, OrderPaid for a PAID one. Each step has one effect however
     * often it runs (I5).
     * @param atMs the workflow's clock (ms since the epoch), at or after the deadline when its timer fired
     * @returns PENDING, changing nothing, while the row's deadline is after atMs
     * @throws non-retryable ORDER_NOT_FOUND when the order has no row
     */
    async settleOrder(order: OrderInput, atMs: number): Promise<Settled> {
      return settle(order, atMs);
    },

    /** For an order PostgreSQL would not store at all: its unit back in Redis and OrderRejected. */
    async rejectUnstored(order: OrderInput, reason: string): Promise<Settled> {
      await store.release(order.saleId, order.itemId, order.orderId);
      await events.publish(event('OrderRejected', order, { reason }));
      return { status: 'REJECTED', reason };
    },

    /** Publishes one event (a retry may publish it twice; its eventId lets consumers drop the copy). */
    async publishEvent(event: OrderEvent): Promise<void> {
      await events.publish(event);
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
