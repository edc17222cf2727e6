/**
 * Activities of orderWorkflow: thin, typed, built from injected clients (PostgreSQL pool, Redis reservation
 * store, Kafka publisher). Temporal runs each at least once, so each is idempotent (I5). PostgreSQL
 * constraint violations are business outcomes and fail non-retryably; connection errors are retried.
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Pool } from 'pg';
import { isConstraintViolation } from '../db';
import type { OrderEvent, OrderInput, OrderStatus } from '../domain';
import type { EventPublisher } from '../events';
import * as orders from '../orders';
import type { ReservationStore } from '../reservations';

export interface ActivityDeps {
  pool: Pool;
  store: ReservationStore;
  events: EventPublisher;
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
  return {
    /** Publishes one event (retries may publish it twice; its eventId lets consumers drop the copy). */
    async publishEvent(event: OrderEvent): Promise<void> {
      await events.publish(event);
    },

    /** Persists the order PENDING and counts it in `sold`, or REJECTED when PostgreSQL says no (I1, I3). */
    async persistOrder(order: OrderInput, deadline: string): Promise<orders.PersistResult> {
      return classified(() => orders.persistOrder(pool, order, new Date(deadline)));
    },

    /** @throws non-retryable ORDER_NOT_PENDING when the row is in another final state (should not happen) */
    async markPaid(orderId: string, paymentId: string): Promise<void> {
      const status: OrderStatus | undefined = await classified(() => orders.markPaid(pool, orderId, paymentId));
      if (status !== 'PAID') {
        throw ApplicationFailure.nonRetryable(`order ${orderId} is ${status ?? 'missing'}, cannot be PAID`, 'ORDER_NOT_PENDING');
      }
    },

    /** Compensation, PostgreSQL part: EXPIRED and sold − 1 in one transaction; a retry changes nothing. */
    async expireOrder(orderId: string): Promise<boolean> {
      return classified(() => orders.expireOrder(pool, orderId));
    },

    /**
     * Settles a paid order: PAID in PostgreSQL, then its OrderPaid event. Runs as a regular activity, after the
     * workflow task that decided PAID has committed, so no late signal can undo the decision behind it.
     * @returns the payment id PostgreSQL holds (differs from paymentId only if another payment won earlier)
     */
    async settlePaid(orderId: string, paymentId: string, event: OrderEvent): Promise<string | null> {
      const status = await classified(() => orders.markPaid(pool, orderId, paymentId));
      if (status !== 'PAID') {
        throw ApplicationFailure.nonRetryable(`order ${orderId} is ${status ?? 'missing'}, cannot be PAID`, 'ORDER_NOT_PENDING');
      }
      const stored = (await orders.findOrder(pool, orderId))?.paymentId ?? null;
      if (stored === paymentId) await events.publish(event);
      return stored;
    },

    /**
     * Compensation for an unpaid order: EXPIRED and sold − 1 in PostgreSQL, the unit back in Redis, then
     * OrderExpired. Each step is idempotent, so a retry of the whole activity has one effect (I4, I5).
     */
    async compensate(saleId: number, itemId: number, orderId: string, event: OrderEvent): Promise<void> {
      await classified(() => orders.expireOrder(pool, orderId));
      await store.release(saleId, itemId, orderId);
      await events.publish(event);
    },

    /** Compensation, Redis part: returns the order's unit if it still holds it; a retry returns nothing. */
    async releaseReservation(saleId: number, itemId: number, orderId: string): Promise<boolean> {
      return store.release(saleId, itemId, orderId);
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
