/**
 * The audit's checks, one per invariant of docs/design.md (I1–I5), each a pure function of what was read
 * (SaleFacts) to a Check with its figures and a few offending ids.
 */
import type { OrderEvent, OrderEventType } from '../order/events';
import type { OrderStatus } from '../order/types';
import { itemShardCount, shardUnits } from '../reservation/layout';
import type { OrderRow, SaleFacts } from './facts';

export interface Check {
  name: string;
  /** Invariant label(s) of docs/design.md. */
  invariant: string;
  ok: boolean;
  figures: Record<string, number | string>;
  /** A few offending ids or rows, when the check fails. */
  examples?: string[];
}

/** The sale's events as readSaleEvents found them, and how many the outbox still held (not yet on the topic). */
export interface SaleEvents {
  events: Map<string, OrderEvent>;
  duplicates: number;
  conflicting: string[];
  unrelayed: number;
}

const EVENT_OF: Record<OrderStatus, OrderEventType | undefined> = {
  PENDING: undefined,
  PAID: 'OrderPaid',
  EXPIRED: 'OrderExpired',
  REJECTED: 'OrderRejected',
  CANCELLED: 'OrderCancelled',
};
const FINAL_EVENTS = new Set<OrderEventType>(['OrderPaid', 'OrderExpired', 'OrderRejected', 'OrderCancelled']);

const sample = (ids: Iterable<string>) => [...ids].slice(0, 5);
const isLive = (o: OrderRow) => o.status === 'PENDING' || o.status === 'PAID';
const countStatus = (facts: SaleFacts, status: OrderStatus) => facts.orders.filter((o) => o.status === status).length;
const quantityOf = (facts: SaleFacts) => facts.items.reduce((n, i) => n + i.quantity, 0);
const soldOf = (facts: SaleFacts) => facts.items.reduce((n, i) => n + i.live, 0);

/** I1 as PostgreSQL holds it (docs/design.md, "Unit slots"): each live order holds its own unit of its item. */
export function noOversell(facts: SaleFacts): Check {
  const oversold = facts.items.filter((i) => i.live > i.quantity || i.units !== i.live || i.outside > 0);
  return {
    name: 'no oversell: each live order holds its own unit of its item (1..quantity), so pending + paid <= quantity, per item',
    invariant: 'I1',
    ok: oversold.length === 0,
    figures: { items: facts.items.length, quantity: quantityOf(facts), sold: soldOf(facts), pending: countStatus(facts, 'PENDING'), paid: countStatus(facts, 'PAID') },
    examples: oversold.map((i) => `item ${i.id}: quantity ${i.quantity}, live orders ${i.live}, distinct units ${i.units}, units missing or out of range ${i.outside}`),
  };
}

/**
 * I1, I2 per stock shard (src/reservation/layout.ts): a unit comes from one shard and goes back to it. Its free
 * units and the units its reservations hold (Redis) are its run of units, each once; so are its free units and
 * the units of the live orders from it (PostgreSQL).
 */
export function conservation(facts: SaleFacts): Check {
  const unitsOf = (list: { itemId: number; stockShard?: number; unit?: number | null }[], itemId: number, k: number) =>
    list.filter((o) => o.itemId === itemId && (o.stockShard ?? 0) === k).map((o) => o.unit ?? 0);
  const live = facts.orders.filter(isLive);
  const partition = (run: number[], a: number[], b: number[]) => {
    const all = [...a, ...b].sort((x, y) => x - y);
    return all.length === run.length && all.every((unit, i) => unit === run[i]);
  };
  const drift = facts.items.flatMap((i) => {
    const shards = itemShardCount(facts.layout, i.id);
    return Array.from({ length: shards }, (_, k) => {
      const run = shardUnits(i.quantity, shards, k);
      const free = facts.freeUnits.get(i.id)?.[k];
      const held = unitsOf(facts.reservations, i.id, k);
      const liveUnits = unitsOf(live, i.id, k);
      const ok = free !== undefined && partition(run, free, held) && partition(run, free, liveUnits);
      return ok ? [] : [`item ${i.id} shard ${k}: quantity ${run.length}, stock ${free?.length}, held ${held.length}, live ${liveUnits.length}`];
    }).flat();
  });
  const stockTotal = [...facts.freeUnits.values()].flat().reduce<number>((n, units) => n + (units?.length ?? 0), 0);
  return {
    name: 'conservation per stock shard: free units (Redis) and held reservations are its units, each once; so are free units and live orders',
    invariant: 'I1, I2',
    ok: drift.length === 0,
    figures: { quantity: quantityOf(facts), shards: facts.layout.tags.length, redisStock: stockTotal, reservations: facts.reservations.length, sold: soldOf(facts) },
    examples: sample(drift),
  };
}

/** I3: one live order per buyer per sale; Redis' buyer entries name exactly the live orders; no claim left. */
export function oneLiveOrderPerBuyer(facts: SaleFacts): Check {
  const live = facts.orders.filter(isLive);
  const liveByBuyer = new Map<string, number>();
  for (const o of live) liveByBuyer.set(o.userId, (liveByBuyer.get(o.userId) ?? 0) + 1);
  const twice = [...liveByBuyer].filter(([, n]) => n > 1).map(([user]) => user);
  const liveIds = new Set(live.map((o) => o.id));
  const buyerMismatch = live.filter((o) => facts.buyers.get(o.userId) !== o.id).map((o) => o.id);
  const staleBuyers = [...facts.buyers].filter(([, orderId]) => !liveIds.has(orderId)).map(([user]) => user);
  return {
    name: 'one live order per buyer per sale, Redis buyers (on their home shards) = live orders, no claim left',
    invariant: 'I3',
    ok: twice.length === 0 && buyerMismatch.length === 0 && staleBuyers.length === 0 && facts.claims.length === 0,
    figures: { buyersWithLiveOrder: liveByBuyer.size, buyersWithTwo: twice.length, redisBuyers: facts.buyers.size, claims: facts.claims.length },
    examples: sample([...twice, ...buyerMismatch, ...staleBuyers, ...facts.claims]),
  };
}

/**
 * I4: every accepted order has one workflow and one row, and has ended: the workflow completed, PostgreSQL and the
 * search attribute agree.
 * @param acceptedOrderIds orderIds a caller saw answered 202, when known
 */
export function everyOrderEnds(facts: SaleFacts, acceptedOrderIds?: readonly string[]): Check {
  const { orders, workflows } = facts;
  const rowIds = new Set(orders.map((o) => o.id));
  const noWorkflow = orders.filter((o) => !workflows.has(o.id)).map((o) => o.id);
  const noRow = [...workflows.keys()].filter((id) => !rowIds.has(id));
  const notAccepted = (acceptedOrderIds ?? []).filter((id) => !workflows.has(id) || !rowIds.has(id));
  const open = [...workflows].filter(([, w]) => w.status !== 'COMPLETED').map(([id]) => id);
  const notFinal = orders.filter((o) => o.status === 'PENDING').map((o) => o.id);
  const disagree = orders.filter((o) => workflows.has(o.id) && workflows.get(o.id)?.orderStatus !== o.status).map((o) => o.id);
  return {
    name: 'every accepted order: one workflow, one row, final state (workflow completed, PostgreSQL and search attribute agree)',
    invariant: 'I4',
    ok: !noWorkflow.length && !noRow.length && !notAccepted.length && !open.length && !notFinal.length && !disagree.length,
    figures: {
      accepted: acceptedOrderIds?.length ?? 'unknown',
      rows: orders.length,
      workflows: workflows.size,
      notCompleted: open.length,
      pending: notFinal.length,
      paid: countStatus(facts, 'PAID'),
      expired: countStatus(facts, 'EXPIRED'),
      rejected: countStatus(facts, 'REJECTED'),
      cancelled: countStatus(facts, 'CANCELLED'),
    },
    examples: sample([...noWorkflow, ...noRow, ...notAccepted, ...open, ...notFinal, ...disagree]),
  };
}

/**
 * I2, I4: an order that ended unsold holds no reservation; the reservations are the live orders, each holding its
 * own unit of its own item on its own shard (totals per shard can agree while two orders swapped units).
 */
export function unitsReturned(facts: SaleFacts): Check {
  const live = facts.orders.filter(isLive);
  const liveIds = new Set(live.map((o) => o.id));
  const reservationOf = new Map(facts.reservations.map((r) => [r.orderId, r]));
  const stillHeld = facts.orders.filter((o) => !isLive(o) && reservationOf.has(o.id)).map((o) => o.id);
  const unknownHeld = facts.reservations.filter((r) => !liveIds.has(r.orderId)).map((r) => r.orderId);
  const misheld = live.flatMap((o) => {
    const r = reservationOf.get(o.id);
    const same = r && r.itemId === o.itemId && (r.stockShard ?? 0) === o.stockShard && r.unit === o.unit;
    return r && !same ? [`${o.id}: unit ${o.unit} of item ${o.itemId} on shard ${o.stockShard}, reserved unit ${r.unit} of item ${r.itemId} on shard ${r.stockShard ?? 0}`] : [];
  });
  return {
    name: 'every EXPIRED/CANCELLED/REJECTED order returned exactly one unit (none still held; held = live orders, each its own unit and shard)',
    invariant: 'I2, I4',
    ok: stillHeld.length === 0 && unknownHeld.length === 0 && misheld.length === 0 && facts.reservations.length === live.length,
    figures: { returned: facts.orders.length - live.length, held: facts.reservations.length, live: live.length, misheld: misheld.length },
    examples: sample([...stillHeld, ...unknownHeld, ...misheld]),
  };
}

/**
 * I5: each order has its OrderPlaced and exactly the final event its status says, naming the payment PostgreSQL
 * kept (PAID) or the reason it kept (CANCELLED).
 */
export function eventsOnKafka(facts: SaleFacts, { events, duplicates, conflicting, unrelayed }: SaleEvents): Check {
  const byOrder = new Map<string, OrderEvent[]>();
  for (const e of events.values()) byOrder.set(e.orderId, [...(byOrder.get(e.orderId) ?? []), e]);
  const missing: string[] = [];
  const wrongFinal: string[] = [];
  for (const o of facts.orders) {
    const own = byOrder.get(o.id) ?? [];
    if (!own.some((e) => e.type === 'OrderPlaced')) missing.push(`${o.id}:OrderPlaced`);
    const finals = own.filter((e) => FINAL_EVENTS.has(e.type));
    const expected = EVENT_OF[o.status];
    const names = (e: OrderEvent) => (o.status === 'PAID' ? e.paymentId === o.paymentId : o.status !== 'CANCELLED' || e.reason === o.reason);
    if (expected && finals.length === 0) missing.push(`${o.id}:${expected}`);
    else if (finals.length > 1 || (finals[0] && (finals[0].type !== expected || !names(finals[0])))) {
      wrongFinal.push(`${o.id}:${finals.map((e) => e.type).join('+')}`);
    }
  }
  const count = (t: OrderEventType) => [...events.values()].filter((e) => e.type === t).length;
  return {
    name: 'every state change has exactly its event on Kafka (deduplicated by eventId, redeliveries identical)',
    invariant: 'I5',
    ok: missing.length === 0 && wrongFinal.length === 0 && conflicting.length === 0 && unrelayed === 0,
    figures: {
      events: events.size,
      unrelayed,
      duplicatesDropped: duplicates,
      OrderPlaced: count('OrderPlaced'),
      OrderPaid: count('OrderPaid'),
      OrderExpired: count('OrderExpired'),
      OrderRejected: count('OrderRejected'),
      OrderCancelled: count('OrderCancelled'),
      PaymentRefundRequired: count('PaymentRefundRequired'),
      missing: missing.length,
      wrongFinalEvent: wrongFinal.length,
      conflictingRedeliveries: conflicting.length,
    },
    examples: sample([...missing, ...wrongFinal, ...conflicting]),
  };
}
