/**
 * Orders in PostgreSQL, the source of truth. Every write is idempotent (I5): a retried activity finds its
 * earlier effect and returns the same answer. Business outcomes (item exhausted, buyer already holds a live
 * order) are answers, not errors: ON CONFLICT and guarded UPDATE … RETURNING keep the transaction healthy.
 */
import type { Pool } from 'pg';
import { inTransaction } from './db';
import type { OrderInput, OrderStatus } from './domain';

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
 * Inserts the order as PENDING and counts it in its item's `sold`, in one transaction guarded by
 * `sold < quantity` (I1). If the item is exhausted in PostgreSQL (Redis drifted) the order is stored as
 * REJECTED (reason SOLD_OUT); if the buyer already has a live order in the sale, REJECTED (ALREADY_PURCHASED, I3).
 * A retry returns the stored outcome and changes nothing.
 */
export async function persistOrder(pool: Pool, order: OrderInput, deadlineAt: Date): Promise<PersistResult> {
  return inTransaction(pool, async (tx) => {
    const values = [order.orderId, order.saleId, order.itemId, order.userId, order.priceMinor, new Date(order.reservedAtMs), deadlineAt];
    const inserted = await tx.query(
      `INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at)
       VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7) ON CONFLICT DO NOTHING RETURNING id`,
      values,
    );
    if (inserted.rowCount === 1) {
      const counted = await tx.query('UPDATE items SET sold = sold + 1 WHERE id = $1 AND sold < quantity RETURNING sold', [order.itemId]);
      if (counted.rowCount === 1) return { status: 'PENDING', reason: null };
      await tx.query(`UPDATE orders SET status = 'REJECTED', reason = 'SOLD_OUT', updated_at = now() WHERE id = $1`, [order.orderId]);
      return { status: 'REJECTED', reason: 'SOLD_OUT' };
    }
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
 * Marks a PENDING order PAID with its payment id.
 * @returns the order's status afterwards: PAID (now or by an earlier run with the same payment) or the
 *   status that prevented it
 */
export async function markPaid(pool: Pool, orderId: string, paymentId: string): Promise<OrderStatus | undefined> {
  const res = await pool.query<{ status: OrderStatus }>(
    `UPDATE orders SET status = 'PAID', payment_id = $2, updated_at = now() WHERE id = $1 AND status = 'PENDING' RETURNING status`,
    [orderId, paymentId],
  );
  if (res.rowCount === 1) return 'PAID';
  return (await findOrder(pool, orderId))?.status;
}

/**
 * Compensation in PostgreSQL: a PENDING order becomes EXPIRED and its unit leaves `sold`, in one transaction.
 * @returns true when this call made the change; false when the order was not PENDING (e.g. a retry)
 */
export async function expireOrder(pool: Pool, orderId: string): Promise<boolean> {
  return inTransaction(pool, async (tx) => {
    const res = await tx.query<{ itemId: number }>(
      `UPDATE orders SET status = 'EXPIRED', updated_at = now() WHERE id = $1 AND status = 'PENDING' RETURNING item_id AS "itemId"`,
      [orderId],
    );
    if (res.rowCount !== 1) return false;
    await tx.query('UPDATE items SET sold = sold - 1 WHERE id = $1', [res.rows[0].itemId]);
    return true;
  });
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
