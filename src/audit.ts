/**
 * Audit of one sale event against the invariants of docs/design.md, reading every store: PostgreSQL (truth),
 * Redis (stock, buyers, reservations), Temporal (one workflow per order, all closed) and the Kafka topic
 * (an event per state change). Each check reports its figures; a sale passes when every check does.
 * Meant for a sale at rest (no order PENDING) — on a live sale the at-rest checks report what is in flight.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { Kafka } from 'kafkajs';
import type { Pool } from 'pg';
import type { OrderEvent, OrderEventType } from './order/events';
import type { OrderStatus } from './order/types';
import { itemShardCount, shardUnits } from './reservation/layout';
import type { ReservationStore } from './reservation/store';
import type { FlashRedis } from './reservation/client';
import { OrderStatusKey } from './workflows/definitions';

export interface Check {
  name: string;
  /** Invariant label(s) of docs/design.md. */
  invariant: string;
  ok: boolean;
  figures: Record<string, number | string>;
  /** A few offending ids or rows, when the check fails. */
  examples?: string[];
}

export interface AuditReport {
  saleId: number;
  ok: boolean;
  checks: Check[];
}

export interface AuditDeps {
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  temporal: Client;
  kafka: Kafka;
  topic: string;
}

const EVENT_OF: Record<OrderStatus, OrderEventType | undefined> = {
  PENDING: undefined,
  PAID: 'OrderPaid',
  EXPIRED: 'OrderExpired',
  REJECTED: 'OrderRejected',
};

const sample = (ids: Iterable<string>) => [...ids].slice(0, 5);
/** How far behind PostgreSQL's clock a producer's may be for the audit still to read all of a sale's events. ms. */
const PRODUCER_CLOCK_MARGIN_MS = 15 * 60_000;

/** @returns the event in a message, or undefined for a message that is not one of ours (other producers may share the topic) */
function parseEvent(value: Buffer | null): OrderEvent | undefined {
  try {
    const event = JSON.parse(value?.toString() ?? '') as OrderEvent;
    return typeof event === 'object' && event !== null && typeof event.eventId === 'string' ? event : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where a sale's events can start on the topic: no event of a sale is older than the sale, so a reader needs
 * the sale's stretch of the topic, not every sale's before it.
 * @returns ms since the epoch, the sale's creation less PRODUCER_CLOCK_MARGIN_MS (a producer's clock behind
 *   PostgreSQL's); undefined when there is no such sale
 */
export async function saleEventsSince(pool: Pool, saleId: number): Promise<number | undefined> {
  const res = await pool.query<{ createdAt: Date }>('SELECT created_at AS "createdAt" FROM sale_events WHERE id = $1', [saleId]);
  return res.rows[0] && res.rows[0].createdAt.getTime() - PRODUCER_CLOCK_MARGIN_MS;
}

/**
 * Reads the topic up to its current end and returns the sale's events, duplicates dropped by eventId (I5).
 * @param sinceMs where to start: the first message stamped at or after it (the producer's clock, ms since the
 *   epoch); the whole topic when omitted
 */
export async function readSaleEvents(
  kafka: Kafka,
  topic: string,
  saleId: number,
  sinceMs?: number,
): Promise<{ events: Map<string, OrderEvent>; duplicates: number; conflicting: string[] }> {
  const groupId = `audit-${randomUUID()}`;
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  const start = new Map(
    sinceMs === undefined ? offsets.map((o) => [o.partition, BigInt(o.low)]) : (await admin.fetchTopicOffsetsByTimestamp(topic, sinceMs)).map((o) => [o.partition, BigInt(o.offset)]),
  );
  // The new group starts where the sale's events can start.
  if (sinceMs !== undefined) await admin.setOffsets({ groupId, topic, partitions: [...start].map(([partition, offset]) => ({ partition, offset: String(offset) })) });
  await admin.disconnect();
  const end = new Map(offsets.filter((o) => BigInt(o.high) > (start.get(o.partition) ?? BigInt(o.low))).map((o) => [o.partition, BigInt(o.high)]));
  const events = new Map<string, OrderEvent>();
  let duplicates = 0;
  // A redelivery must carry the same facts; one eventId with two different stories is a bug, not a duplicate.
  const conflicting: string[] = [];
  const facts = (e: OrderEvent) => JSON.stringify({ ...e, occurredAt: undefined });
  if (end.size === 0) return { events, duplicates, conflicting };
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            for (const message of batch.messages) {
              const event = parseEvent(message.value);
              if (event?.saleId === saleId) {
                const seen = events.get(event.eventId);
                if (!seen) events.set(event.eventId, event);
                else {
                  duplicates += 1;
                  if (facts(seen) !== facts(event)) conflicting.push(event.eventId);
                }
              }
            }
            const last = batch.messages.at(-1);
            const high = end.get(batch.partition);
            if (last && high !== undefined && BigInt(last.offset) + 1n >= high) end.delete(batch.partition);
            if (end.size === 0) resolve();
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return { events, duplicates, conflicting };
}

/**
 * Audits one sale.
 * @param acceptedOrderIds orderIds the caller saw answered 202, when known (the demo passes them)
 */
export async function auditSale(deps: AuditDeps, saleId: number, acceptedOrderIds?: readonly string[]): Promise<AuditReport> {
  const checks: Check[] = [];
  // I1 as PostgreSQL holds it (docs/design.md, "Unit slots"): each live order holds one unit of its item, 1..quantity,
  // no unit held twice; so live orders <= quantity. Read from the orders themselves, not from their constraints.
  const items = (
    await deps.pool.query<{ id: number; quantity: number; live: number; units: number; outside: number }>(
      `SELECT i.id, i.quantity, count(o.id)::int AS live, count(DISTINCT o.unit)::int AS units,
              count(o.id) FILTER (WHERE o.unit IS NULL OR o.unit NOT BETWEEN 1 AND i.quantity)::int AS outside
       FROM items i LEFT JOIN orders o ON o.item_id = i.id AND o.status IN ('PENDING', 'PAID')
       WHERE i.sale_id = $1 GROUP BY i.id ORDER BY i.id`,
      [saleId],
    )
  ).rows;
  const orders = (
    await deps.pool.query<{ id: string; userId: string; itemId: number; status: OrderStatus; paymentId: string | null; stockShard: number; unit: number | null }>(
      `SELECT id, user_id AS "userId", item_id AS "itemId", status, payment_id AS "paymentId", stock_shard AS "stockShard", unit FROM orders WHERE sale_id = $1`,
      [saleId],
    )
  ).rows;
  const byStatus = (s: OrderStatus) => orders.filter((o) => o.status === s).length;
  const quantity = items.reduce((n, i) => n + i.quantity, 0);
  const sold = items.reduce((n, i) => n + i.live, 0);

  const oversold = items.filter((i) => i.live > i.quantity || i.units !== i.live || i.outside > 0);
  checks.push({
    name: 'no oversell: each live order holds its own unit of its item (1..quantity), so pending + paid <= quantity, per item',
    invariant: 'I1',
    ok: oversold.length === 0,
    figures: { items: items.length, quantity, sold, pending: byStatus('PENDING'), paid: byStatus('PAID') },
    examples: oversold.map((i) => `item ${i.id}: quantity ${i.quantity}, live orders ${i.live}, distinct units ${i.units}, units missing or out of range ${i.outside}`),
  });

  // Per stock shard (src/reservation/layout.ts): a unit comes from one shard and goes back to it. Its free units
  // (Redis) and the units its reservations hold (Redis) are its run of units, each once; so are its free units
  // and the units of the live orders from it (PostgreSQL).
  const layout = await deps.store.layouts.get(saleId);
  const freeUnits = await deps.store.unitsByShard(saleId, items.map((i) => i.id));
  const reservations = await deps.store.reservations(saleId);
  const unitsOf = (list: { itemId: number; stockShard?: number; unit?: number | null }[], itemId: number, k: number) =>
    list.filter((o) => o.itemId === itemId && (o.stockShard ?? 0) === k).map((o) => o.unit ?? 0);
  const liveOrders = orders.filter((o) => o.status === 'PENDING' || o.status === 'PAID');
  const partition = (run: number[], a: number[], b: number[]) => {
    const all = [...a, ...b].sort((x, y) => x - y);
    return all.length === run.length && all.every((unit, i) => unit === run[i]);
  };
  const drift = items.flatMap((i) => {
    const shards = itemShardCount(layout, i.id);
    return Array.from({ length: shards }, (_, k) => {
      const run = shardUnits(i.quantity, shards, k);
      const free = freeUnits.get(i.id)?.[k];
      const held = unitsOf(reservations, i.id, k);
      const live = unitsOf(liveOrders, i.id, k);
      const ok = free !== undefined && partition(run, free, held) && partition(run, free, live);
      return ok ? [] : [`item ${i.id} shard ${k}: quantity ${run.length}, stock ${free?.length}, held ${held.length}, live ${live.length}`];
    }).flat();
  });
  const stockTotal = [...freeUnits.values()].flat().reduce<number>((n, units) => n + (units?.length ?? 0), 0);
  checks.push({
    name: 'conservation per stock shard: free units (Redis) and held reservations are its units, each once; so are free units and live orders',
    invariant: 'I1, I2',
    ok: drift.length === 0,
    figures: { quantity, shards: layout.tags.length, redisStock: stockTotal, reservations: reservations.length, sold },
    examples: sample(drift),
  });

  const live = orders.filter((o) => o.status === 'PENDING' || o.status === 'PAID');
  const liveByBuyer = new Map<string, number>();
  for (const o of live) liveByBuyer.set(o.userId, (liveByBuyer.get(o.userId) ?? 0) + 1);
  const twice = [...liveByBuyer].filter(([, n]) => n > 1).map(([user]) => user);
  const buyers = await deps.store.buyers(saleId);
  const claims = await deps.store.claims(saleId);
  const liveIds = new Set(live.map((o) => o.id));
  const buyerMismatch = live.filter((o) => buyers.get(o.userId) !== o.id).map((o) => o.id);
  const staleBuyers = [...buyers].filter(([, orderId]) => !liveIds.has(orderId)).map(([user]) => user);
  checks.push({
    name: 'one live order per buyer per sale, Redis buyers (on their home shards) = live orders, no claim left',
    invariant: 'I3',
    ok: twice.length === 0 && buyerMismatch.length === 0 && staleBuyers.length === 0 && claims.length === 0,
    figures: { buyersWithLiveOrder: liveByBuyer.size, buyersWithTwo: twice.length, redisBuyers: buyers.size, claims: claims.length },
    examples: sample([...twice, ...buyerMismatch, ...staleBuyers, ...claims]),
  });

  const workflows = new Map<string, { status: string; orderStatus: string | undefined }>();
  for await (const wf of deps.temporal.workflow.list({ query: `SaleId = ${saleId}` })) {
    workflows.set(wf.workflowId, { status: wf.status.name, orderStatus: wf.typedSearchAttributes.get(OrderStatusKey) });
  }
  const rowIds = new Set(orders.map((o) => o.id));
  const noWorkflow = orders.filter((o) => !workflows.has(o.id)).map((o) => o.id);
  const noRow = [...workflows.keys()].filter((id) => !rowIds.has(id));
  const notAccepted = (acceptedOrderIds ?? []).filter((id) => !workflows.has(id) || !rowIds.has(id));
  const open = [...workflows].filter(([, w]) => w.status !== 'COMPLETED').map(([id]) => id);
  const notFinal = orders.filter((o) => o.status === 'PENDING').map((o) => o.id);
  const disagree = orders.filter((o) => workflows.has(o.id) && workflows.get(o.id)?.orderStatus !== o.status).map((o) => o.id);
  checks.push({
    name: 'every accepted order: one workflow, one row, final state (workflow completed, PostgreSQL and search attribute agree)',
    invariant: 'I4',
    ok: !noWorkflow.length && !noRow.length && !notAccepted.length && !open.length && !notFinal.length && !disagree.length,
    figures: {
      accepted: acceptedOrderIds?.length ?? 'unknown',
      rows: orders.length,
      workflows: workflows.size,
      notCompleted: open.length,
      pending: notFinal.length,
      paid: byStatus('PAID'),
      expired: byStatus('EXPIRED'),
      rejected: byStatus('REJECTED'),
    },
    examples: sample([...noWorkflow, ...noRow, ...notAccepted, ...open, ...notFinal, ...disagree]),
  });

  const reservedIds = new Set(reservations.map((r) => r.orderId));
  const stillHeld = orders.filter((o) => (o.status === 'EXPIRED' || o.status === 'REJECTED') && reservedIds.has(o.id)).map((o) => o.id);
  const unknownHeld = reservations.filter((r) => !liveIds.has(r.orderId)).map((r) => r.orderId);
  // Totals per shard can agree while two orders' reservations name each other's unit: compare each order with its own.
  const reservationOf = new Map(reservations.map((r) => [r.orderId, r]));
  const misheld = live.flatMap((o) => {
    const r = reservationOf.get(o.id);
    const same = r && r.itemId === o.itemId && (r.stockShard ?? 0) === o.stockShard && r.unit === o.unit;
    return r && !same ? [`${o.id}: unit ${o.unit} of item ${o.itemId} on shard ${o.stockShard}, reserved unit ${r.unit} of item ${r.itemId} on shard ${r.stockShard ?? 0}`] : [];
  });
  checks.push({
    name: 'every EXPIRED/REJECTED order returned exactly one unit (none still held; held = live orders, each its own unit and shard)',
    invariant: 'I2, I4',
    ok: stillHeld.length === 0 && unknownHeld.length === 0 && misheld.length === 0 && reservations.length === live.length,
    figures: { returned: byStatus('EXPIRED') + byStatus('REJECTED'), held: reservations.length, live: live.length, misheld: misheld.length },
    examples: sample([...stillHeld, ...unknownHeld, ...misheld]),
  });

  const { events, duplicates, conflicting } = await readSaleEvents(deps.kafka, deps.topic, saleId, await saleEventsSince(deps.pool, saleId));
  const byOrder = new Map<string, OrderEvent[]>();
  for (const e of events.values()) byOrder.set(e.orderId, [...(byOrder.get(e.orderId) ?? []), e]);
  const missing: string[] = [];
  const wrongFinal: string[] = [];
  for (const o of orders) {
    const own = byOrder.get(o.id) ?? [];
    if (!own.some((e) => e.type === 'OrderPlaced')) missing.push(`${o.id}:OrderPlaced`);
    const finals = own.filter((e) => e.type === 'OrderPaid' || e.type === 'OrderExpired' || e.type === 'OrderRejected');
    const expected = EVENT_OF[o.status];
    if (expected && finals.length === 0) missing.push(`${o.id}:${expected}`);
    // Exactly one final event, the one PostgreSQL's status says, naming the payment PostgreSQL kept.
    else if (finals.length > 1 || (finals[0] && (finals[0].type !== expected || (o.status === 'PAID' && finals[0].paymentId !== o.paymentId)))) {
      wrongFinal.push(`${o.id}:${finals.map((e) => e.type).join('+')}`);
    }
  }
  const count = (t: OrderEventType) => [...events.values()].filter((e) => e.type === t).length;
  checks.push({
    name: 'every state change has exactly its event on Kafka (deduplicated by eventId, redeliveries identical)',
    invariant: 'I5',
    ok: missing.length === 0 && wrongFinal.length === 0 && conflicting.length === 0,
    figures: {
      events: events.size,
      duplicatesDropped: duplicates,
      OrderPlaced: count('OrderPlaced'),
      OrderPaid: count('OrderPaid'),
      OrderExpired: count('OrderExpired'),
      OrderRejected: count('OrderRejected'),
      PaymentRefundRequired: count('PaymentRefundRequired'),
      missing: missing.length,
      wrongFinalEvent: wrongFinal.length,
      conflictingRedeliveries: conflicting.length,
    },
    examples: sample([...missing, ...wrongFinal, ...conflicting]),
  });

  return { saleId, ok: checks.every((c) => c.ok), checks };
}

/** Renders a report as lines of text: one line per check with its figures, offending examples below. */
export function formatAudit(report: AuditReport): string {
  const lines = [`Audit of sale ${report.saleId}: ${report.ok ? 'PASS' : 'FAIL'}`];
  for (const c of report.checks) {
    const figures = Object.entries(c.figures)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    lines.push(`  [${c.ok ? 'ok' : 'FAIL'}] ${c.invariant.padEnd(6)} ${c.name}\n         ${figures}`);
    if (!c.ok && c.examples?.length) lines.push(`         e.g. ${c.examples.join(', ')}`);
  }
  return lines.join('\n');
}
