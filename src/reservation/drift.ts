/**
 * Where Redis drifted from PostgreSQL, and the repairs that bring it back (docs/design.md, "The reconciler"): a
 * pure comparison of what PostgreSQL holds of a sale (read first) with what its stock shards hold (read after),
 * which src/reservation/reconciler.ts makes and applies, each repair a compare-and-set (lua/repair.lua).
 */
import type { RowState } from '../order/truth';
import type { OrderInput } from '../order/types';
import type { SaleMark } from './closing';
import { reservationValue } from './formats';
import { homeShard, itemShardCount, shardUnits, type SaleLayout } from './layout';

/** An item's quantity, split over its shards (layout.ts shardUnits). */
export interface ItemUnits {
  itemId: number;
  quantity: number;
}

/** What PostgreSQL held when the pass began: the live orders (each holding its unit), the sale's state, its items. */
export interface SaleTruth {
  live: readonly OrderInput[];
  mark: SaleMark;
  items: readonly ItemUnits[];
}

/** What one stock shard held, read in this order: free units, buyers' entries, claims, then reservations. */
export interface ShardView {
  k: number;
  /** The loaded mark as read: a repair runs only while it is the same (the shard was not rebuilt since). */
  epoch: string;
  /** Free units per item the shard carries, in list order (duplicates kept). */
  free: ReadonlyMap<number, readonly number[]>;
  /** Entries of the buyers homed here: userId → orderId. */
  buyers: ReadonlyMap<string, string>;
  /** Orders whose buyer is claimed here (a purchase between its claim and its take). */
  claimed: ReadonlySet<string>;
  /** Reservations made here: orderId → its value as stored, and the order it holds. */
  reservations: ReadonlyMap<string, { value: string; order: OrderInput }>;
  mark: SaleMark | undefined;
}

/** One repair, on shard k; `seen` says what was found, for the log. */
export type Repair = { k: number; seen: string } & (
  | { kind: 'release'; orderId: string; userId: string; itemId: number; unit: number; value: string; unitBack: boolean; home: number }
  | { kind: 'restore'; order: OrderInput; value: string }
  | { kind: 'setBuyer'; userId: string; orderId: string; expected: string }
  | { kind: 'clearBuyer'; userId: string; orderId: string }
  | { kind: 'take'; itemId: number; unit: number; holder: string; holderValue: string }
  | { kind: 'dedupe'; itemId: number; unit: number }
  | { kind: 'free'; itemId: number; unit: number }
  | { kind: 'mark'; mark: SaleMark }
);
export type RepairKind = Repair['kind'];

const FINAL = new Set(['EXPIRED', 'CANCELLED', 'REJECTED']);
const unitKey = (itemId: number, unit: number | undefined) => `${itemId}:${unit}`;

/** @returns the orders the plan needs the state of: reserved or named by a buyer's entry, and not live in the truth */
export function toLookUp(truth: SaleTruth, shards: readonly ShardView[]): string[] {
  const live = new Set(truth.live.map((o) => o.orderId));
  const ids = new Set<string>();
  for (const shard of shards) {
    for (const orderId of shard.reservations.keys()) if (!live.has(orderId)) ids.add(orderId);
    for (const orderId of shard.buyers.values()) if (!live.has(orderId)) ids.add(orderId);
  }
  return [...ids];
}

/**
 * The repairs that bring the shards read in line with the truth:
 * - a reservation whose order is final (for graceMs, so its own compensation goes first) → released, its unit back
 *   only if no live order, no other reservation here and no free entry holds it;
 * - a live order with no reservation on its shard → its reservation written back, its unit out of the free list;
 * - a live order's buyer without their entry (or one naming an order held nowhere) → the entry set;
 * - an entry naming an order final or unknown, held nowhere and not claimed → cleared;
 * - a unit free and held → out of the free list; free twice → once; neither free nor held → free again;
 * - a mark older than the sale's state → the state's.
 * A reservation whose order has no row yet (the normal state of a stampede) is left alone.
 * @param rows the state of the orders toLookUp named, read after the shards
 */
export function planRepairs(layout: SaleLayout, truth: SaleTruth, shards: readonly ShardView[], rows: ReadonlyMap<string, RowState>, graceMs: number): Repair[] {
  const repairs: Repair[] = [];
  const reservedAnywhere = new Set(shards.flatMap((s) => [...s.reservations.keys()]));
  const liveById = new Map(truth.live.map((o) => [o.orderId, o]));
  const liveBuyers = new Set(truth.live.map((o) => o.userId));
  const liveUnits = new Set(truth.live.map((o) => unitKey(o.itemId, o.unit)));

  for (const shard of shards) {
    const k = shard.k;
    const heldHere = new Map<string, string[]>();
    for (const [orderId, { order }] of shard.reservations) {
      const key = unitKey(order.itemId, order.unit);
      heldHere.set(key, [...(heldHere.get(key) ?? []), orderId]);
    }
    const freeHere = new Set([...shard.free].flatMap(([itemId, units]) => units.map((u) => unitKey(itemId, u))));

    for (const [orderId, { value, order }] of shard.reservations) {
      if (liveById.has(orderId)) continue;
      const row = rows.get(orderId);
      if (!row || !FINAL.has(row.status) || row.ageMs < graceMs) continue;
      const key = unitKey(order.itemId, order.unit);
      const unitBack = !liveUnits.has(key) && !freeHere.has(key) && (heldHere.get(key) ?? []).length === 1;
      const release = { orderId, userId: order.userId, itemId: order.itemId, unit: order.unit as number, value, unitBack, home: homeShard(layout, order.userId) };
      repairs.push({ k, kind: 'release', ...release, seen: `reservation of a ${row.status} order` });
    }

    for (const order of truth.live) {
      if ((order.stockShard ?? 0) !== k || shard.reservations.has(order.orderId)) continue;
      const value = reservationValue({ ...order, stockEpoch: Number(shard.epoch) });
      repairs.push({ k, kind: 'restore', order, value, seen: `a live order (${order.orderId}) without its reservation` });
    }

    for (const [userId, orderId] of shard.buyers) {
      const live = liveById.get(orderId);
      if (live && live.userId === userId) continue;
      if (reservedAnywhere.has(orderId) || shard.claimed.has(orderId)) continue;
      const row = rows.get(orderId);
      if (row && !FINAL.has(row.status)) continue;
      // The buyer's own live order, if any, takes the entry (below); otherwise it is cleared.
      if (liveBuyers.has(userId)) continue;
      repairs.push({ k, kind: 'clearBuyer', userId, orderId, seen: `an entry naming a ${row ? row.status : 'unknown'} order held nowhere` });
    }

    for (const order of truth.live) {
      if (homeShard(layout, order.userId) !== k) continue;
      const entry = shard.buyers.get(order.userId);
      if (entry === order.orderId) continue;
      // An entry naming another order that is still reserved somewhere: that order's end clears it first.
      if (entry !== undefined && (reservedAnywhere.has(entry) || shard.claimed.has(entry))) continue;
      repairs.push({ k, kind: 'setBuyer', userId: order.userId, orderId: order.orderId, expected: entry ?? '', seen: `a live order's buyer entry ${entry ? `naming ${entry}` : 'missing'}` });
    }

    repairs.push(...unitRepairs(layout, truth, shard, heldHere, liveUnits));
    if (!shard.mark || shard.mark.version < truth.mark.version) repairs.push({ k, kind: 'mark', mark: truth.mark, seen: `mark ${shard.mark ? `${shard.mark.closed ?? 'OPEN'}:${shard.mark.version}` : 'missing'}` });
  }
  return repairs;
}

/** The unit repairs of one shard: each unit of its run free once, or held, never both, never neither. */
function unitRepairs(layout: SaleLayout, truth: SaleTruth, shard: ShardView, heldHere: ReadonlyMap<string, string[]>, liveUnits: ReadonlySet<string>): Repair[] {
  const repairs: Repair[] = [];
  const k = shard.k;
  for (const item of truth.items) {
    const shards = itemShardCount(layout, item.itemId);
    const listed = shard.free.get(item.itemId);
    if (k >= shards || !listed) continue;
    const counts = new Map<number, number>();
    for (const unit of listed) counts.set(unit, (counts.get(unit) ?? 0) + 1);
    for (const unit of shardUnits(item.quantity, shards, k)) {
      const key = unitKey(item.itemId, unit);
      const free = counts.get(unit) ?? 0;
      const holders = heldHere.get(key) ?? [];
      if (free > 1) repairs.push({ k, kind: 'dedupe', itemId: item.itemId, unit, seen: `unit ${key} free ${free} times` });
      if (free > 0 && holders.length) {
        const holder = holders[0];
        repairs.push({ k, kind: 'take', itemId: item.itemId, unit, holder, holderValue: shard.reservations.get(holder)?.value ?? '', seen: `unit ${key} free and reserved by ${holder}` });
      }
      // A live order without its reservation is restored, which takes its unit out of the free list.
      if (free === 0 && !holders.length && !liveUnits.has(key)) repairs.push({ k, kind: 'free', itemId: item.itemId, unit, seen: `unit ${key} neither free nor held` });
    }
  }
  return repairs;
}
