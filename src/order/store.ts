/**
 * The order's life in PostgreSQL: every transition (place, pay, cancel, expire, reject) is one statement under its
 * guards (I1: each live order holds its own unit; I3: one live order per buyer; the payment window, rows.ts) that
 * also queues its event in the outbox (outbox.ts), idempotent (I5: a retry finds its earlier effect and answers the
 * same). Business outcomes are answers, not errors. Writes PostgreSQL only: the unit goes back to Redis in the
 * workflow's compensation step (docs/design.md, "Unit slots").
 */
import type { Pool } from 'pg';
import { activeTraceParent } from '../tracing';
import type { OrderEvent } from './events';
import { saleOfOrder } from './orderId';
import { queueEvent } from './outbox';
import { asOrder, cancelRow, isPaymentUsed, ORDER_COLUMNS, ORDER_TERMS, outcome, payOrStore, placeRow, refusal, refusedFor, rejectRow, settleRow, type OrderRow } from './rows';
import { compensationFor, paymentDeadlineMs, paysPrice, type CancelReason, type CancelResult, type Order, type OrderInput, type OrderStatus, type Outcome, type PayResult, type Payment } from './types';

/**
 * Where an accepted order's terms are read while it has no row: its reservation (src/reservation/store.ts,
 * ReservationStore, implements it).
 */
export interface ReservationTerms {
  /** @returns the order's terms from its reservation in the sale, or undefined when it holds none */
  findReservation(saleId: number, orderId: string): Promise<OrderInput | undefined>;
  /** @returns whether the buyer's entry (I3) still names the order: a press of theirs is answered 409 naming it */
  holdsBuyer(saleId: number, userId: string, orderId: string): Promise<boolean>;
}

/** A payment's outcome; `stored` when this payment also stored the order (its workflow had not yet). */
export type PayOutcome = PayResult & { stored?: true };

/** The order a cancel ended, as the release of its unit needs it (ReservationStore.release). */
export type CancelledOrder = Pick<OrderInput, 'orderId' | 'saleId' | 'itemId' | 'userId' | 'stockShard'>;

/** A cancel's outcome; a CANCELLED one names its order, whose unit its caller may give back at once. */
export type CancelOutcome = { error: Extract<CancelResult, { error: string }>['error'] } | (Extract<CancelResult, { status: 'CANCELLED' }> & { order: CancelledOrder });

/** Orders in PostgreSQL (the source of truth) and their units in Redis. Methods throw pg or ioredis errors when a store is unreachable. */
export class Orders {
  constructor(
    private readonly pool: Pool,
    private readonly reservations: ReservationTerms,
  ) {}

  /**
   * Places an accepted order: stored PENDING with the unit it holds, in one insert under orders_live_unit and
   * orders_live_unit_of_item (I1) and the one-live-order index (I3), with OrderPlaced. REJECTED (SOLD_OUT) when
   * another live order holds its unit or the unit is none of the item's (Redis drifted), whichever index fired
   * first, REJECTED (ALREADY_PURCHASED) when only the buyer's other live order in the sale stands in its way
   * (refusedFor: so its unit goes back only while no live order holds it), REJECTED (STOCK_REBUILT) when its
   * stock shard's epoch is no longer the one its unit was taken in (a rebuild listed that unit free without
   * knowing the order); a refused order is stored without a unit, with OrderPlaced and OrderRejected. A retry,
   * or a row stored first (by the starter, or PAID by the payment route), returns what is stored and changes
   * nothing.
   * @param traceParent the span placing it (tracing on), kept in the row for the payment's span to link to
   * @throws pg constraint errors (23xxx, 22xxx) for an order PostgreSQL cannot store at all
   */
  async place(order: OrderInput, traceParent = activeTraceParent()): Promise<Outcome> {
    let reason: 'SOLD_OUT' | 'ALREADY_PURCHASED' | undefined;
    try {
      await placeRow(this.pool, order, traceParent);
    } catch (err) {
      const guard = refusal(err);
      if (!guard) throw err;
      reason = await refusedFor(this.pool, order, guard);
    }
    const stored = await this.stored(order.orderId);
    if (stored) return stored;
    // The insert wrote nothing: refused, or its unit's epoch is over (a rebuild listed the unit free without it).
    await rejectRow(this.pool, order, reason ?? 'STOCK_REBUILT', traceParent);
    return this.storedOutcome(order.orderId);
  }

  /**
   * Takes a payment, decided by PostgreSQL in one statement: the order becomes PAID only while it is PENDING,
   * its deadline ahead (windowOpen) and the amount its price. An order that has no row yet (its workflow has
   * not stored it) is stored PAID from its reservation in Redis, with its unit under the same guards as place,
   * in that same statement; its workflow then finds it PAID. The same payment again is answered PAID again, even
   * after the deadline (the payment service retries a payment whose answer it lost).
   * One statement, not a try-update-then-insert sequence (docs/performance.md, the payment route).
   * @param order the order's terms when the caller has them (its workflow); else they come from its reservation
   * @param payment amount in minor units
   * @param receivedAtMs when Temporal received a payment sent to the workflow (ms): judged then (default: now)
   * @returns PAID (`stored` when this call stored the order), or why not, each changing nothing:
   *   AMOUNT_MISMATCH, PAYMENT_WINDOW_CLOSED (deadline passed, or EXPIRED), ORDER_NOT_PENDING (paid by another
   *   payment, or REJECTED), PAYMENT_ID_USED (this paymentId paid another order); undefined when there is no
   *   such order
   */
  async pay(orderId: string, payment: Payment, order: OrderInput, receivedAtMs?: number): Promise<PayOutcome>;
  async pay(orderId: string, payment: Payment, order?: OrderInput): Promise<PayOutcome | undefined>;
  async pay(orderId: string, payment: Payment, order?: OrderInput, receivedAtMs?: number): Promise<PayOutcome | undefined> {
    // An order's reservation outlives the wait for its row: no row and no reservation means no such order.
    const terms = order ?? (await this.reserved(orderId));
    for (;;) {
      let decided;
      try {
        decided = await payOrStore(this.pool, orderId, payment, terms, activeTraceParent(), receivedAtMs);
      } catch (err) {
        if (isPaymentUsed(err)) return { error: 'PAYMENT_ID_USED' };
        if (!terms || !refusal(err)) throw err;
        // PostgreSQL refused to store it live (the buyer's other live order, its unit held): place records
        // the refusal, then decide against that row.
        await this.place(terms);
        continue;
      }
      const { paid, stored, row } = decided;
      if (paid) return { status: 'PAID', paymentId: payment.paymentId, ...(stored && { stored: true }) };
      // Whatever this order's state, money that paid another order is that order's: no refund is due for it.
      if (decided.usedElsewhere) return { error: 'PAYMENT_ID_USED' };
      if (!row) {
        if (!terms) return undefined;
        if (!paysPrice(terms, payment)) return { error: 'AMOUNT_MISMATCH' };
        if (!decided.termsOpen) return { error: 'PAYMENT_WINDOW_CLOSED' };
        // No row was stored: one appeared after the statement's snapshot (being stored by the starter), or the
        // terms' epoch is over; place finds the first or stores the refusal, and the payment is decided against it.
        await this.place(terms);
        continue;
      }
      // Before the replay check: a paymentId that paid, sent again with another amount, is no replay (I7).
      if (!paysPrice(row, payment)) return { error: 'AMOUNT_MISMATCH' };
      if (row.status === 'PAID' && row.paymentId === payment.paymentId) return { status: 'PAID', paymentId: payment.paymentId };
      if (row.status === 'CANCELLED') return { error: 'ORDER_CANCELLED' };
      if (row.status === 'EXPIRED' || (row.status === 'PENDING' && !row.open)) return { error: 'PAYMENT_WINDOW_CLOSED' };
      // A payable row the UPDATE did not take was changed between the snapshot and the UPDATE: decide again.
      if (row.status !== 'PENDING') return { error: 'ORDER_NOT_PENDING' };
    }
  }

  /**
   * Cancels a PENDING order while its payment window is open, decided by PostgreSQL in one statement on its
   * row, so that a cancel, a payment and the deadline race on one row and exactly one wins (docs/design.md,
   * "Cancel"). An order with no row yet (its workflow has not stored it) is first stored from its reservation
   * under place's guards, then cancelled; past its deadline it is refused without a write. The same cancel again, or any cancel of a CANCELLED order, answers
   * CANCELLED with the reason stored first (I5). Writes PostgreSQL only: the unit goes back to Redis in the
   * caller's next step (the route's, at once) and in the workflow's compensation (idempotent, I5).
   * @param order the order's terms when the caller has them (its workflow); else they come from its reservation
   * @returns CANCELLED with its order, or why not, each changing nothing: ORDER_ALREADY_PAID,
   *   PAYMENT_WINDOW_CLOSED (the deadline passed: EXPIRED, or about to be), ORDER_NOT_PENDING (REJECTED);
   *   undefined when there is no such order
   */
  async cancel(orderId: string, reason: CancelReason, order?: OrderInput): Promise<CancelOutcome | undefined> {
    let terms = order;
    for (;;) {
      const { cancelled, row, termsOpen } = await cancelRow(this.pool, orderId, reason, terms, activeTraceParent());
      if (!row) {
        if (!terms) {
          terms = await this.reserved(orderId);
          if (!terms) return undefined;
          // Decided again with the terms, whose deadline the statement reads by PostgreSQL's clock.
          continue;
        }
        // Past its deadline: refused without a write; its workflow expires it (I7).
        if (!termsOpen) return { error: 'PAYMENT_WINDOW_CLOSED' };
        await this.place(terms);
        continue;
      }
      const { status, open, reason: stored, ...target } = row;
      if (cancelled || status === 'CANCELLED') return { status: 'CANCELLED', reason: cancelled ? reason : (stored as CancelReason), order: target };
      if (status === 'PAID') return { error: 'ORDER_ALREADY_PAID' };
      if (status === 'EXPIRED' || (status === 'PENDING' && !open)) return { error: 'PAYMENT_WINDOW_CLOSED' };
      // A cancellable row the UPDATE did not take was changed between the snapshot and the UPDATE: decide again.
      if (status !== 'PENDING') return { error: 'ORDER_NOT_PENDING' };
    }
  }

  /**
   * Settles an order once its deadline has passed by atMs, or once PostgreSQL holds it final: an unpaid one
   * becomes EXPIRED in one statement on its own row, which queues OrderExpired (its unit is free in PostgreSQL once
   * it is no longer live); any other is read as it is. Giving the unit back to Redis is the caller's next step
   * (compensationFor). One effect however often it runs (I5).
   * @param atMs the workflow's clock (ms since the epoch), at or after the deadline when its timer fired
   * @returns the final outcome; PENDING, changing nothing, while the deadline is after atMs; undefined when there
   *   is no such row
   */
  async settle(order: OrderInput, atMs: number): Promise<Outcome | undefined> {
    const row = await settleRow(this.pool, order.orderId, atMs, activeTraceParent());
    return row && outcome(row.status, row.paymentId, row.reason);
  }

  /**
   * @returns the order as readers see it: from PostgreSQL once stored, else from its reservation in Redis
   *   (PENDING from the 202 until its workflow stores it, I4); undefined when there is no such order. An order
   *   that ended without a sale (EXPIRED, REJECTED) reads PENDING until its compensation has cleared its buyer's
   *   entry, so that what the buyer reads agrees with what their next press decides (I3: final, they may buy
   *   again). With Redis unreachable it reads as PostgreSQL holds it (a press then answers 503 anyway).
   */
  async find(orderId: string): Promise<Order | undefined> {
    const res = await this.pool.query<OrderRow>(`SELECT ${ORDER_COLUMNS} FROM orders WHERE id = $1`, [orderId]);
    if (res.rows[0]) {
      const order = asOrder(res.rows[0]);
      if (!compensationFor(order)) return order;
      const compensating = await this.reservations.holdsBuyer(order.saleId, order.userId, order.orderId).catch(() => false);
      return compensating ? { ...order, status: 'PENDING', reason: undefined } : order;
    }
    const held = await this.reserved(orderId);
    if (!held) return undefined;
    const { orderId: id, saleId, itemId, userId, priceMinor } = held;
    return { orderId: id, saleId, itemId, userId, status: 'PENDING', priceMinor, paymentDeadline: new Date(paymentDeadlineMs(held)).toISOString() };
  }

  /**
   * @returns the traceparent of the span that stored the order (place, tracing on), or undefined: none stored,
   *   or no such row. One more read, made only for a recorded payment span, which links to it.
   */
  async traceParentOf(orderId: string): Promise<string | undefined> {
    const res = await this.pool.query<{ traceParent: string | null }>('SELECT trace_parent AS "traceParent" FROM orders WHERE id = $1', [orderId]);
    return res.rows[0]?.traceParent ?? undefined;
  }

  /**
   * An accepted order's terms from its id alone, for a run a payment started (docs/design.md, "Payments before the
   * start"): its row's, else its reservation's. @returns undefined when the id names no accepted order
   */
  async terms(orderId: string): Promise<OrderInput | undefined> {
    const read = async () => (await this.pool.query<OrderInput & { unit: number | null }>(`SELECT ${ORDER_TERMS} FROM orders WHERE id = $1`, [orderId])).rows[0];
    // No reservation either: the row again, as a cancel may have stored it and released between the two reads.
    const row = (await read()) ?? (await this.reserved(orderId)) ?? (await read());
    if (!row) return undefined;
    const { unit, reservedAtMs, paymentWindowMs, ...terms } = row;
    return { ...terms, reservedAtMs: Math.round(reservedAtMs), paymentWindowMs: Math.round(paymentWindowMs), ...(unit !== null && unit !== undefined && { unit }) };
  }

  /** @returns the order's terms from its reservation in its sale (which its id carries), or undefined */
  private async reserved(orderId: string): Promise<OrderInput | undefined> {
    const saleId = saleOfOrder(orderId);
    return saleId === undefined ? undefined : this.reservations.findReservation(saleId, orderId);
  }

  /** @returns what PostgreSQL holds of the order, or undefined when it has no row */
  async stored(orderId: string): Promise<Outcome | undefined> {
    const res = await this.pool.query<{ status: OrderStatus; paymentId: string | null; reason: string | null }>(
      'SELECT status, payment_id AS "paymentId", reason FROM orders WHERE id = $1',
      [orderId],
    );
    return res.rows[0] && outcome(res.rows[0].status, res.rows[0].paymentId, res.rows[0].reason);
  }

  /**
   * Queues an event made outside a transition's statement (an order PostgreSQL would not store at all, a refund)
   * in the outbox, which the relay publishes (src/order/outbox.ts). Queued twice, it is published twice under one
   * eventId (I5).
   */
  queueEvent(event: OrderEvent): Promise<void> {
    return queueEvent(this.pool, event, activeTraceParent());
  }

  private async storedOutcome(orderId: string): Promise<Outcome> {
    const stored = await this.stored(orderId);
    if (!stored) throw new Error(`order ${orderId} has no row`);
    return stored;
  }
}
