/**
 * How orders sit in PostgreSQL: the rules the statements share (payment window, stock epoch), the row as it reads,
 * the constraints whose refusals are answers, the payment's one statement, and the live orders a rebuild reads.
 */
import type { Pool } from 'pg';
import { eventOf, outboxInsert } from './outbox';
import { paymentDeadlineMs, type CancelReason, type Order, type OrderInput, type OrderStatus, type Outcome, type Payment } from './types';

/**
 * The payment-window rule, in SQL: a payment is taken while the deadline the buyer was shown is still ahead of
 * `clock` (PostgreSQL's `now()`); the expiry needs it not to be (at the workflow's clock, the same on one host).
 */
export const windowOpen = (deadline: string, clock: string) => `${deadline} > ${clock}`;

/**
 * The stock-epoch rule, in SQL: the order's unit was taken in its stock shard's current epoch
 * (migrations/…_stock-epochs.sql). Read FOR SHARE, so that a rebuild's move of the epoch waits for the stores
 * under way and the stores after it see the new epoch.
 */
export const epochHolds = (saleId: string, shard: string, epoch: string) =>
  `${epoch}::int = (SELECT epoch FROM stock_shards WHERE sale_id = ${saleId} AND shard = ${shard} FOR SHARE)`;

export const ORDER_COLUMNS = `id AS "orderId", sale_id AS "saleId", item_id AS "itemId", user_id AS "userId", status,
  price_minor::float8 AS "priceMinor", payment_id AS "paymentId", reason, deadline_at AS "deadlineAt"`;

/** An order as its row reads: Order, with the deadline as a Date and nulls where Order leaves a field out. */
export type OrderRow = Omit<Order, 'paymentDeadline' | 'paymentId' | 'reason'> & { paymentId: string | null; reason: string | null; deadlineAt: Date };

export function asOrder(row: OrderRow): Order {
  return {
    orderId: row.orderId,
    saleId: row.saleId,
    itemId: row.itemId,
    userId: row.userId,
    status: row.status,
    priceMinor: row.priceMinor,
    paymentDeadline: row.deadlineAt.toISOString(),
    ...(row.paymentId && { paymentId: row.paymentId }),
    ...(row.reason && { reason: row.reason }),
  };
}

export function outcome(status: OrderStatus, paymentId: string | null | undefined, reason: string | null | undefined): Outcome {
  return { status, ...(paymentId && { paymentId }), ...(reason && { reason }) };
}

const constraintOf = (err: unknown) => (err as { constraint?: unknown }).constraint;
/**
 * Which guard refused to store a live order: its unit is none of the item's (Redis handed out a unit it should not
 * have: I1 holds whatever Redis says), or a unique index (its unit held by another live order, or its buyer holding
 * another live order in the sale, I3: PostgreSQL names whichever fired first); undefined for any other error.
 */
export function refusal(err: unknown): 'UNIT_OUTSIDE' | 'UNIQUE' | undefined {
  const constraint = constraintOf(err);
  if (constraint === 'orders_live_unit_of_item') return 'UNIT_OUTSIDE';
  if (constraint === 'orders_live_unit' || constraint === 'orders_one_live_per_buyer') return 'UNIQUE';
  return undefined;
}

/**
 * Why a refused order is REJECTED, whichever unique index fired first: SOLD_OUT while another live order holds its
 * unit (which then must not go back to Redis stock: compensationFor), else ALREADY_PURCHASED (its buyer's other
 * live order; its unit goes back).
 */
export async function refusedFor(pool: Pool, order: Pick<OrderInput, 'orderId' | 'itemId' | 'unit'>, guard: 'UNIT_OUTSIDE' | 'UNIQUE'): Promise<'SOLD_OUT' | 'ALREADY_PURCHASED'> {
  if (guard === 'UNIT_OUTSIDE') return 'SOLD_OUT';
  const res = await pool.query<{ held: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM orders WHERE item_id = $1 AND unit = $2 AND status IN ('PENDING', 'PAID') AND id <> $3) AS held`,
    [order.itemId, order.unit ?? null, order.orderId],
  );
  return res.rows[0].held ? 'SOLD_OUT' : 'ALREADY_PURCHASED';
}
/**
 * The place's statement: the order stored PENDING with its unit under its shard's epoch (epochHolds), with
 * OrderPlaced; nothing when its row exists or the epoch is over.
 * @throws pg errors: place's refusals (refusal()), other constraint violations
 */
export async function placeRow(pool: Pool, order: OrderInput, traceParent: string | undefined): Promise<void> {
  await pool.query(
    `WITH placed AS (
       INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at, stock_shard, unit, item_quantity, trace_parent)
       SELECT $1, $2, $3, $4, 'PENDING', $5, $6, $7, $8, $9, (SELECT quantity FROM items WHERE id = $3), $10
       WHERE ${epochHolds('$2', '$8', '$11')} ON CONFLICT (id) DO NOTHING RETURNING id, sale_id, item_id, user_id
     ), events AS (${outboxInsert([eventOf('placed', 'OrderPlaced', 1)], '$10')})
     SELECT 1`,
    [...termValues(order), order.unit, traceParent ?? null, order.stockEpoch ?? null],
  );
}

/** The refusal's statement: the order stored REJECTED without a unit, with OrderPlaced and OrderRejected; nothing when its row exists. */
export async function rejectRow(pool: Pool, order: OrderInput, reason: string, traceParent: string | undefined): Promise<void> {
  await pool.query(
    `WITH rejected AS (
       INSERT INTO orders (id, sale_id, item_id, user_id, status, reason, price_minor, reserved_at, deadline_at, stock_shard, trace_parent)
       VALUES ($1, $2, $3, $4, 'REJECTED', $9, $5, $6, $7, $8, $10) ON CONFLICT (id) DO NOTHING RETURNING id, sale_id, item_id, user_id, reason
     ), events AS (${outboxInsert([eventOf('rejected', 'OrderPlaced', 1), eventOf('rejected', 'OrderRejected', 2, { reason: 's.reason' })], '$10')})
     SELECT 1`,
    [...termValues(order), reason, traceParent ?? null],
  );
}

/** An order's terms as the place statements take them, $1..$8. */
function termValues(order: OrderInput) {
  return [order.orderId, order.saleId, order.itemId, order.userId, order.priceMinor, new Date(order.reservedAtMs), new Date(paymentDeadlineMs(order)), order.stockShard ?? 0];
}

/** The payment's id is recorded as taken for another order (the payments table's key): one payment pays one order. */
export const isPaymentUsed = (err: unknown) => constraintOf(err) === 'payments_pkey';

/** The moment a payment is judged at: when Temporal received it ($14), else PostgreSQL's now. */
const AT = 'coalesce($14::timestamptz, now())';
/**
 * The payment's one statement. Its parts see one snapshot: the row as it was (`current`); the UPDATE that pays a
 * payable row; the INSERT that stores the order PAID from its terms when there was no row, its deadline ahead
 * and the amount its price, under place's guards (I1, I3); and the payment recorded as taken, which fails the
 * whole statement when its paymentId paid another order.
 * @returns paid (stored: by the INSERT), whether the paymentId had paid another order by the snapshot
 *   (usedElsewhere), the row as the statement's snapshot saw it (undefined: none), and
 *   whether the terms' deadline is ahead by PostgreSQL's clock (false without terms)
 * @param receivedAtMs when Temporal received a payment sent to the workflow (ms), judged then, not now
 * @throws pg errors: payments_pkey (paymentId used), place's refusals (refusal()) from the INSERT
 */
export async function payOrStore(pool: Pool, orderId: string, payment: Payment, terms: OrderInput | undefined, traceParent?: string, receivedAtMs?: number) {
  const res = await pool.query<{ paid: number; stored: number; usedElsewhere: boolean; status: OrderStatus | null; paymentId: string | null; priceMinor: number | null; open: boolean | null; termsOpen: boolean | null }>(
    `WITH current AS (
       SELECT status, payment_id, price_minor, ${windowOpen('deadline_at', AT)} AS open FROM orders WHERE id = $1
     ), paid AS (
       UPDATE orders SET status = 'PAID', payment_id = $2, updated_at = now()
       WHERE id = $1 AND status = 'PENDING' AND ${windowOpen('deadline_at', AT)} AND price_minor = $3 RETURNING id, sale_id, item_id, user_id
     ), stored AS (
       INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, payment_id, reserved_at, deadline_at, stock_shard, unit, item_quantity)
       SELECT $1, $4, $5, $6, 'PAID', $7, $2, $8, $9, $10, $11, (SELECT quantity FROM items WHERE id = $5)
       WHERE $4::int IS NOT NULL AND NOT EXISTS (SELECT 1 FROM current) AND ${windowOpen('$9::timestamptz', AT)} AND $7::bigint = $3
         AND ${epochHolds('$4', '$10', '$12')}
       ON CONFLICT (id) DO NOTHING RETURNING id, sale_id, item_id, user_id
     ), taken AS (
       INSERT INTO payments (payment_id, order_id, amount_minor) SELECT $2, id, $3 FROM (SELECT id FROM paid UNION ALL SELECT id FROM stored) p
     ), events AS (
       ${outboxInsert([eventOf('stored', 'OrderPlaced', 1), eventOf('(SELECT * FROM paid UNION ALL SELECT * FROM stored)', 'OrderPaid', 2, { paymentId: '$2::text', amount: '$3::bigint' })], '$13')}
     )
     SELECT (SELECT count(*) FROM paid)::int AS paid, (SELECT count(*) FROM stored)::int AS stored, c.status,
            EXISTS (SELECT 1 FROM payments WHERE payment_id = $2 AND order_id <> $1) AS "usedElsewhere",
            c.payment_id AS "paymentId", c.price_minor::float8 AS "priceMinor", c.open,
            ${windowOpen('$9::timestamptz', AT)} AS "termsOpen"
     FROM (SELECT) one LEFT JOIN current c ON true`,
    [
      orderId,
      payment.paymentId,
      payment.amount,
      terms?.saleId ?? null,
      terms?.itemId ?? null,
      terms?.userId ?? null,
      terms?.priceMinor ?? null,
      terms ? new Date(terms.reservedAtMs) : null,
      terms ? new Date(paymentDeadlineMs(terms)) : null,
      terms ? (terms.stockShard ?? 0) : null,
      terms?.unit ?? null,
      terms?.stockEpoch ?? null,
      traceParent ?? null,
      receivedAtMs === undefined ? null : new Date(receivedAtMs),
    ],
  );
  const { paid, stored, usedElsewhere, status, paymentId, priceMinor, open, termsOpen } = res.rows[0];
  return {
    paid: paid + stored === 1,
    usedElsewhere,
    termsOpen: termsOpen === true,
    stored: stored === 1,
    row: status === null ? undefined : { status, paymentId, priceMinor: priceMinor as number, open: open as boolean },
  };
}

/**
 * The cancel's one statement: the row as it was (`current`, with what a release needs) and the UPDATE that
 * cancels a PENDING row while its deadline is ahead by PostgreSQL's clock (windowOpen), both on one snapshot.
 * @param terms the order's terms, read when it may have no row: whether their deadline is ahead (termsOpen)
 * @returns cancelled (by this statement), the row as the snapshot saw it (undefined: none), and whether the
 *   terms' deadline is ahead by PostgreSQL's clock (false without terms)
 */
export async function cancelRow(pool: Pool, orderId: string, reason: CancelReason, terms?: OrderInput, traceParent?: string) {
  const res = await pool.query<{
    cancelled: number;
    status: OrderStatus | null;
    reason: string | null;
    open: boolean | null;
    saleId: number;
    itemId: number;
    userId: string;
    stockShard: number;
    termsOpen: boolean | null;
  }>(
    `WITH current AS (
       SELECT status, reason, ${windowOpen('deadline_at', 'now()')} AS open, sale_id, item_id, user_id, stock_shard FROM orders WHERE id = $1
     ), cancelled AS (
       UPDATE orders SET status = 'CANCELLED', reason = $2, updated_at = now()
       WHERE id = $1 AND status = 'PENDING' AND ${windowOpen('deadline_at', 'now()')} RETURNING id, sale_id, item_id, user_id
     ), events AS (
       ${outboxInsert([eventOf('cancelled', 'OrderCancelled', 1, { reason: '$2::text' })], '$4')}
     )
     SELECT (SELECT count(*) FROM cancelled)::int AS cancelled, c.status, c.reason, c.open,
            c.sale_id AS "saleId", c.item_id AS "itemId", c.user_id AS "userId", c.stock_shard AS "stockShard",
            ${windowOpen('$3::timestamptz', 'now()')} AS "termsOpen"
     FROM (SELECT) one LEFT JOIN current c ON true`,
    [orderId, reason, terms ? new Date(paymentDeadlineMs(terms)) : null, traceParent ?? null],
  );
  const { cancelled, status, termsOpen, ...row } = res.rows[0];
  return { cancelled: cancelled === 1, termsOpen: termsOpen === true, row: status === null ? undefined : { ...row, orderId, status, open: row.open === true } };
}

/** @returns the sale's PENDING and PAID orders (which hold units, I2) with their terms, for a rebuild of Redis */
export function liveOrders(pool: Pool, saleId: number): Promise<OrderInput[]> {
  return ordersIn(pool, saleId, ['PENDING', 'PAID']);
}

/**
 * @returns the sale's CANCELLED orders with their terms: a rebuild queues their starts again, as a cancel may
 *   have stored one before its workflow started, and its start queue entry may have gone with the shard
 */
export function cancelledOrders(pool: Pool, saleId: number): Promise<OrderInput[]> {
  return ordersIn(pool, saleId, ['CANCELLED']);
}

/** An order's row as its terms (OrderInput, without its epoch), a SELECT list. */
export const ORDER_TERMS = `id AS "orderId", sale_id AS "saleId", item_id AS "itemId", user_id AS "userId", price_minor::float8 AS "priceMinor",
  (extract(epoch FROM reserved_at) * 1000)::float8 AS "reservedAtMs",
  (extract(epoch FROM deadline_at - reserved_at) * 1000)::float8 AS "paymentWindowMs", stock_shard AS "stockShard", unit`;

async function ordersIn(pool: Pool, saleId: number, statuses: OrderStatus[]): Promise<OrderInput[]> {
  const res = await pool.query<OrderInput>(`SELECT ${ORDER_TERMS} FROM orders WHERE sale_id = $1 AND status = ANY($2)`, [saleId, statuses]);
  return res.rows;
}

/**
 * The expiry's one statement (Orders.settle): a PENDING row past its deadline by atMs becomes EXPIRED, with
 * OrderExpired queued; any other is read as it is.
 * @returns the row's status after it, or undefined when there is no such row
 */
export async function settleRow(pool: Pool, orderId: string, atMs: number, traceParent?: string) {
  const res = await pool.query<{ status: OrderStatus; paymentId: string | null; reason: string | null }>(
    `WITH expired AS (
       UPDATE orders SET status = 'EXPIRED', updated_at = now()
       WHERE id = $1 AND status = 'PENDING' AND NOT ${windowOpen('deadline_at', '$2')} RETURNING id, sale_id, item_id, user_id
     ), events AS (${outboxInsert([eventOf('expired', 'OrderExpired', 1)], '$3')})
     SELECT CASE WHEN EXISTS (SELECT 1 FROM expired) THEN 'EXPIRED' ELSE o.status END AS status,
            o.payment_id AS "paymentId", o.reason
     FROM orders o WHERE o.id = $1`,
    [orderId, new Date(atMs), traceParent ?? null],
  );
  return res.rows[0];
}
