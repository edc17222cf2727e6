/**
 * Orders in PostgreSQL, the source of truth. Every write is idempotent (I5): a retried activity finds its
 * earlier effect and returns the same answer. Business outcomes (item exhausted, buyer already holds a live
 * order) are answers, not errors: ON CONFLICT and guarded UPDATE … RETURNING keep the transaction healthy.
 */
import type { Pool } from 'pg';
import { inTransaction } from '../db';
import type { OrderInput, OrderStatus, PayResult } from './types';

export interface OrderRow {
  orderId: string;
  saleId: number;
  itemId: number;
  userId: string;
  status: OrderStatus;
  priceMinor: number;
  reason: string | null;
  paymentId: string | null;
  reservedAt: Date;
  deadlineAt: Date;
  updatedAt: Date;
}

/** Result of persisting a new order: PENDING and counted in `sold`, or REJECTED with the reason. */
export interface PersistResult {
  status: OrderStatus;
  reason: string | null;
}

const COLUMNS = `id AS "orderId", sale_id AS "saleId", item_id AS "itemId", user_id AS "userId", status,
  price_minor::float8 AS "priceMinor", reason, payment_id AS "paymentId", reserved_at AS "reservedAt",
  deadline_at AS "deadlineAt", updated_at AS "updatedAt"`;

/**
 * Inserts the order as PENDING and counts it in its item's `sold`, in one statement guarded by the CHECK
 * `sold <= quantity` (I1). If the item is exhausted in PostgreSQL (Redis drifted) the order is stored as
 * REJECTED (reason SOLD_OUT); if the buyer already has a live order in the sale, REJECTED (ALREADY_PURCHASED, I3).
 * A retry returns the stored outcome and changes nothing.
 */
export async function persistOrder(pool: Pool, order: OrderInput, deadlineAt: Date): Promise<PersistResult> {
  const values = [order.orderId, order.saleId, order.itemId, order.userId, order.priceMinor, new Date(order.reservedAtMs), deadlineAt];
  try {
    // One statement, so no round trip to this client while the item's row is locked (from its UPDATE to the
    // commit): every order of an item queues on that lock. As BEGIN, INSERT, UPDATE, COMMIT it stayed locked
    // across a round trip, and in a burst of route payments 16 sessions on average waited for it.
    const stored = await pool.query<{ inserted: number }>(
      `WITH inserted AS (
         INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at)
         VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7) ON CONFLICT DO NOTHING RETURNING id
       ), counted AS (
         UPDATE items SET sold = sold + 1 WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted) RETURNING sold
       )
       SELECT count(*)::int AS inserted FROM inserted`,
      values,
    );
    if (stored.rows[0].inserted === 1) return { status: 'PENDING', reason: null };
  } catch (err) {
    if ((err as { constraint?: unknown }).constraint !== 'items_sold_within_quantity') throw err;
    // The item is exhausted in PostgreSQL: the statement wrote nothing, and the order is stored refused.
    await pool.query(
      `INSERT INTO orders (id, sale_id, item_id, user_id, status, reason, price_minor, reserved_at, deadline_at)
       VALUES ($1, $2, $3, $4, 'REJECTED', 'SOLD_OUT', $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
      values,
    );
    return (await pool.query<PersistResult>('SELECT status, reason FROM orders WHERE id = $1', [order.orderId])).rows[0];
  }
  return inTransaction(pool, async (tx) => {
    const existing = await tx.query<PersistResult>('SELECT status, reason FROM orders WHERE id = $1', [order.orderId]);
    if (existing.rowCount === 1) return existing.rows[0];
    // The insert lost to the one-live-order-per-buyer index, not to this order's own row.
    await tx.query(
      `INSERT INTO orders (id, sale_id, item_id, user_id, status, reason, price_minor, reserved_at, deadline_at)
       VALUES ($1, $2, $3, $4, 'REJECTED', 'ALREADY_PURCHASED', $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
      values,
    );
    return (await tx.query<PersistResult>('SELECT status, reason FROM orders WHERE id = $1', [order.orderId])).rows[0];
  });
}

/**
 * Stores an order that has no row yet as PAID, in one statement: the payment route's way to take a payment
 * for an order its workflow has not stored. persistOrder and payOrder in one, so the order is never seen
 * PENDING in between, and its workflow, whenever it runs, finds the row PAID and settles it in its first task
 * (the route need not signal it). PostgreSQL's clock decides the deadline as in payOrder, the row counts in
 * `sold` under the CHECK `sold <= quantity` (I1) as in persistOrder, and the one-live-order index stands (I3).
 * The caller checks the amount against the price first.
 * @param priceMinor the order's price, which the payment's amount matched (minor units)
 * @returns true when this call stored it PAID; false when it wrote nothing: a row exists (the workflow's, or
 *   an earlier payment's), the deadline has passed, the buyer holds another live order, or the item is
 *   exhausted in PostgreSQL (persistOrder and payOrder then give the answer)
 */
export async function storePaidOrder(pool: Pool, order: OrderInput, deadlineAt: Date, paymentId: string): Promise<boolean> {
  try {
    const stored = await pool.query<{ inserted: number }>(
      `WITH inserted AS (
         INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, payment_id, reserved_at, deadline_at)
         SELECT $1, $2, $3, $4, 'PAID', $5, $6, $7, $8 WHERE $8::timestamptz > now()
         ON CONFLICT DO NOTHING RETURNING id
       ), counted AS (
         UPDATE items SET sold = sold + 1 WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted) RETURNING sold
       )
       SELECT count(*)::int AS inserted FROM inserted`,
      [order.orderId, order.saleId, order.itemId, order.userId, order.priceMinor, paymentId, new Date(order.reservedAtMs), deadlineAt],
    );
    return stored.rows[0].inserted === 1;
  } catch (err) {
    if ((err as { constraint?: unknown }).constraint === 'items_sold_within_quantity') return false;
    throw err;
  }
}

/**
 * Decides a payment against the payment window, in one conditional UPDATE: PostgreSQL is the arbiter of
 * payment against deadline. The order becomes PAID only if it is PENDING, its deadline is still ahead by
 * PostgreSQL's clock and the amount is its price; the expiry (expireOrder) changes only a PENDING order too,
 * so exactly one of the two wins, whichever commits first. The same payment again is answered PAID again
 * (idempotent per paymentId and amount).
 * @param amount minor units
 * @returns PAID, or why not: AMOUNT_MISMATCH (nothing changes), PAYMENT_WINDOW_CLOSED (deadline passed,
 *   or EXPIRED), ORDER_NOT_PENDING (paid by another payment, or REJECTED); undefined when there is no such row
 */
export async function payOrder(pool: Pool, orderId: string, paymentId: string, amount: number): Promise<PayResult | undefined> {
  for (;;) {
    const paid = await pool.query(
      `UPDATE orders SET status = 'PAID', payment_id = $2, updated_at = now()
       WHERE id = $1 AND status = 'PENDING' AND deadline_at > now() AND price_minor = $3 RETURNING id`,
      [orderId, paymentId, amount],
    );
    if (paid.rowCount === 1) return { status: 'PAID', paymentId };
    const res = await pool.query<{ status: OrderStatus; paymentId: string | null; priceMinor: number; closed: boolean }>(
      `SELECT status, payment_id AS "paymentId", price_minor::float8 AS "priceMinor", deadline_at <= now() AS closed FROM orders WHERE id = $1`,
      [orderId],
    );
    const row = res.rows[0];
    if (!row) return undefined;
    // Before the replay check: a paymentId that paid, sent again with another amount, is no replay (I7).
    if (row.priceMinor !== amount) return { error: 'AMOUNT_MISMATCH' };
    if (row.status === 'PAID' && row.paymentId === paymentId) return { status: 'PAID', paymentId };
    if (row.status === 'EXPIRED' || (row.status === 'PENDING' && row.closed)) return { error: 'PAYMENT_WINDOW_CLOSED' };
    // A payable row the UPDATE did not see was inserted between the two statements (the workflow storing the
    // order as the payment arrived): decide again, now that it exists (found by the fault campaign, seed 1003).
    if (row.status !== 'PENDING') return { error: 'ORDER_NOT_PENDING' };
  }
}

/** An order's final word in PostgreSQL, as expireOrder reads it. */
export interface Settlement {
  status: OrderStatus;
  paymentId: string | null;
  reason: string | null;
  /** Minor units. */
  priceMinor: number;
}

/**
 * Compensation in PostgreSQL: a PENDING order whose deadline is at or before atMs becomes EXPIRED and its unit
 * leaves `sold`, in one statement (so one transaction). atMs is the workflow's clock when its timer fired, at or
 * after the deadline: on one host the same clock as PostgreSQL's, which payOrder reads; across hosts their skew
 * may send the workflow round its settle-again loop, and exactly one of payment and expiry still wins.
 * @param atMs ms since the epoch
 * @returns the order afterwards: EXPIRED (now or before), PAID or REJECTED (settled otherwise), PENDING (its
 *   deadline is after atMs); undefined when there is no such row
 */
export async function expireOrder(pool: Pool, orderId: string, atMs: number): Promise<Settlement | undefined> {
  const res = await pool.query<Settlement>(
    `WITH expired AS (
       UPDATE orders SET status = 'EXPIRED', updated_at = now()
       WHERE id = $1 AND status = 'PENDING' AND deadline_at <= $2 RETURNING item_id
     ), uncounted AS (
       UPDATE items SET sold = sold - 1 FROM expired WHERE items.id = expired.item_id
     )
     SELECT CASE WHEN EXISTS (SELECT 1 FROM expired) THEN 'EXPIRED' ELSE o.status END AS status,
            o.payment_id AS "paymentId", o.reason, o.price_minor::float8 AS "priceMinor"
     FROM orders o WHERE o.id = $1`,
    [orderId, new Date(atMs)],
  );
  return res.rows[0];
}

/** @returns the order, or undefined when there is no such row */
export async function findOrder(pool: Pool, orderId: string): Promise<OrderRow | undefined> {
  const res = await pool.query<OrderRow>(`SELECT ${COLUMNS} FROM orders WHERE id = $1`, [orderId]);
  return res.rows[0];
}

/** @returns the sale's PENDING and PAID orders, which hold units (I2) */
export async function liveOrders(pool: Pool, saleId: number): Promise<OrderRow[]> {
  const res = await pool.query<OrderRow>(`SELECT ${COLUMNS} FROM orders WHERE sale_id = $1 AND status IN ('PENDING', 'PAID')`, [saleId]);
  return res.rows;
}
