/**
 * What PostgreSQL, the truth, says of a sale's orders, read by the reconciler (src/reservation/reconciler.ts) to
 * bring Redis back in line with it: the rows changed since a moment, the state of given orders, and which units
 * live orders hold now.
 */
import type { Pool } from 'pg';
import { ORDER_TERMS } from './rows';
import type { OrderInput, OrderStatus } from './types';

/** An order's state, with how long ago its last transition was (ms, by PostgreSQL's clock). */
export interface RowState {
  status: OrderStatus;
  ageMs: number;
}

/** An order changed since a moment: its terms and its state. */
export type ChangedOrder = OrderInput & RowState;

/** @returns the state of each order that has a row, by id (an order absent from the map has none) */
export async function rowStates(pool: Pool, orderIds: readonly string[]): Promise<Map<string, RowState>> {
  if (!orderIds.length) return new Map();
  const res = await pool.query<{ orderId: string } & RowState>(
    `SELECT id AS "orderId", status, (extract(epoch FROM now() - updated_at) * 1000)::float8 AS "ageMs" FROM orders WHERE id = ANY($1::uuid[])`,
    [orderIds],
  );
  return new Map(res.rows.map(({ orderId, ...state }) => [orderId, state]));
}

/**
 * The orders of the given sales whose row was written at or after sinceMs (by PostgreSQL's clock: a transition's
 * `updated_at`), through the index orders_updated: one query for every sale.
 * @param sinceMs ms since the epoch by PostgreSQL's clock; undefined: its clock now less lookBackMs
 * @returns those orders, and PostgreSQL's clock at the read (ms since the epoch) for the next call
 */
export async function changedSince(pool: Pool, saleIds: readonly number[], sinceMs: number | undefined, lookBackMs: number): Promise<{ orders: ChangedOrder[]; nowMs: number }> {
  const res = await pool.query<{ nowMs: number; orders: ChangedOrder[] | null }>(
    `WITH clock AS (SELECT now() AS now)
     SELECT (extract(epoch FROM clock.now) * 1000)::float8 AS "nowMs",
            (SELECT json_agg(o) FROM (
               SELECT ${ORDER_TERMS}, status, (extract(epoch FROM clock.now - updated_at) * 1000)::float8 AS "ageMs"
               FROM orders WHERE updated_at >= coalesce($2::timestamptz, clock.now - $3 * interval '1 millisecond') AND sale_id = ANY($1)
             ) o) AS orders
     FROM clock`,
    [saleIds, sinceMs === undefined ? null : new Date(sinceMs), lookBackMs],
  );
  return { orders: res.rows[0].orders ?? [], nowMs: res.rows[0].nowMs };
}

/** @returns which of the given units of items a live (PENDING or PAID) order holds now, as `itemId:unit` */
export async function heldUnits(pool: Pool, units: readonly { itemId: number; unit: number }[]): Promise<Set<string>> {
  if (!units.length) return new Set();
  const res = await pool.query<{ key: string }>(
    `SELECT o.item_id || ':' || o.unit AS key FROM orders o JOIN unnest($1::int[], $2::int[]) AS u(item_id, unit) ON o.item_id = u.item_id AND o.unit = u.unit
     WHERE o.status IN ('PENDING', 'PAID')`,
    [units.map((u) => u.itemId), units.map((u) => u.unit)],
  );
  return new Set(res.rows.map((r) => r.key));
}
