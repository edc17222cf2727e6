/** What the audit reads of one sale, once, from every store: PostgreSQL's items and orders, Redis, Temporal. */
import type { Client } from '@temporalio/client';
import type { Pool } from 'pg';
import type { SaleLayout } from '../reservation/layout';
import type { ReservationStore } from '../reservation/store';
import type { OrderInput, OrderStatus } from '../order/types';
import { OrderStatusKey } from '../workflows/definitions';

/** An item with its live orders (PENDING, PAID) counted by PostgreSQL. */
export interface ItemRow {
  id: number;
  quantity: number;
  live: number;
  /** Distinct units the live orders hold. */
  units: number;
  /** Live orders whose unit is missing or outside 1..quantity. */
  outside: number;
}

export interface OrderRow {
  id: string;
  userId: string;
  itemId: number;
  status: OrderStatus;
  paymentId: string | null;
  /** Why it was REJECTED or CANCELLED. */
  reason: string | null;
  stockShard: number;
  unit: number | null;
}

export interface SaleFacts {
  saleId: number;
  items: ItemRow[];
  orders: OrderRow[];
  layout: SaleLayout;
  /** Free units per item, per stock shard (undefined: the shard holds no stock key). */
  freeUnits: Map<number, (number[] | undefined)[]>;
  /** The orders holding a reservation, as Redis keeps them. */
  reservations: OrderInput[];
  /** Buyer → the order their entry names (I3). */
  buyers: Map<string, string>;
  claims: string[];
  /** Workflow id → its execution status and OrderStatus search attribute. */
  workflows: Map<string, { status: string; orderStatus: string | undefined }>;
}

/** @returns the sale's facts, read store by store (a sale at rest reads the same in any order) */
export async function readFacts(deps: { pool: Pool; store: ReservationStore; temporal: Client }, saleId: number): Promise<SaleFacts> {
  // Read from the orders themselves, not from their constraints.
  const items = (
    await deps.pool.query<ItemRow>(
      `SELECT i.id, i.quantity, count(o.id)::int AS live, count(DISTINCT o.unit)::int AS units,
              count(o.id) FILTER (WHERE o.unit IS NULL OR o.unit NOT BETWEEN 1 AND i.quantity)::int AS outside
       FROM items i LEFT JOIN orders o ON o.item_id = i.id AND o.status IN ('PENDING', 'PAID')
       WHERE i.sale_id = $1 GROUP BY i.id ORDER BY i.id`,
      [saleId],
    )
  ).rows;
  const orders = (
    await deps.pool.query<OrderRow>(
      `SELECT id, user_id AS "userId", item_id AS "itemId", status, payment_id AS "paymentId", reason, stock_shard AS "stockShard", unit FROM orders WHERE sale_id = $1`,
      [saleId],
    )
  ).rows;
  const workflows = new Map<string, { status: string; orderStatus: string | undefined }>();
  for await (const wf of deps.temporal.workflow.list({ query: `SaleId = ${saleId}` })) {
    workflows.set(wf.workflowId, { status: wf.status.name, orderStatus: wf.typedSearchAttributes.get(OrderStatusKey) });
  }
  return {
    saleId,
    items,
    orders,
    layout: await deps.store.layouts.get(saleId),
    freeUnits: await deps.store.view.unitsByShard(saleId, items.map((i) => i.id)),
    reservations: await deps.store.view.reservations(saleId),
    buyers: await deps.store.view.buyers(saleId),
    claims: await deps.store.view.claims(saleId),
    workflows,
  };
}
