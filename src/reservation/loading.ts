/**
 * A sale's stock into Redis, and a rebuild of the shards that lost their data (no loaded mark) from PostgreSQL's
 * live orders and the kept shards' reservations; a shard that holds its data is never rewritten. Loads and
 * rebuilds of a shard are exclusive (shardLock.ts), move its epoch on before reading the live orders, and put their
 * work in place in one script (staging.ts). Why: docs/design.md, "A rebuild restores what was lost".
 */
import { randomUUID } from 'node:crypto';
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import type { SaleMark } from './closing';
import { claimMember, entryFields, parseClaimMember, reservationValue } from './formats';
import { homeShard, itemShardCount, shardKeys, type SaleLayout } from './layout';
import { LOAD, LOCK_POLL_MS, REBUILD, ShardLocks } from './shardLock';
import { exec, PUSH_BATCH, Staging, type ItemQuantity } from './staging';
import type { ReservationStore } from './store';

export type { ItemQuantity } from './staging';

/** Thrown when a shard's rebuild is already under way, or done since its loss was found. */
export class RebuildUnderWay extends Error {}

/**
 * Where a load or a rebuild reads what it puts in place (PostgreSQL, src/sale/sales.ts), under the shards' locks.
 * Each method first moves the shards' epochs on, then reads the sale's live orders.
 */
export interface StockSource {
  /**
   * A first load: epoch 0 to 1. @throws (its own error) when a shard was loaded before: only a rebuild restores it
   * @returns the shards' new epochs and the sale's live orders
   */
  firstLoad(shards: readonly number[]): Promise<LoadSource>;
  /**
   * Undoes firstLoad (epoch 1 back to 0) for a load that failed before anything went in place: no unit was handed
   * out in epoch 1, and a plain load may try again.
   */
  undoFirstLoad(shards: readonly number[]): Promise<void>;
  /** A rebuild: each shard's next epoch. @returns the shards' new epochs and the sale's live orders */
  nextEpoch(shards: readonly number[]): Promise<LoadSource>;
}

/** What a load or a rebuild puts in place: the shards' new epochs, the live orders, and the sale's closed mark. */
export interface LoadSource {
  epochs: ReadonlyMap<number, number>;
  liveOrders: OrderInput[];
  /** The sale's state and its control's number (src/sale/controls.ts), for the shards' closed marks. */
  mark: SaleMark;
  /** A rebuild's: the CANCELLED orders, whose starts it queues again (a cancel may have stored one before its start). */
  cancelled?: OrderInput[];
}

/** Loads and rebuilds sales in Redis, over a store's client. Methods throw ioredis errors when Redis is unreachable. */
export class StockLoader {
  private readonly redis: FlashRedis;
  private readonly staging: Staging;

  constructor(private readonly store: ReservationStore) {
    this.redis = store.redis;
    this.staging = new Staging(store.redis);
  }

  /** @returns per shard of the sale, whether it holds its data: its loaded mark exists */
  async holding(saleId: number): Promise<boolean[]> {
    const layout = await this.store.layouts.get(saleId);
    return Promise.all(layout.tags.map(async (tag) => (await idempotent(() => this.redis.exists(shardKeys(tag).loaded))) === 1));
  }

  /**
   * Loads every shard not loaded yet, for the first time (source.firstLoad refuses a shard loaded before): each
   * item's run of units on it. A load waits while another load or a rebuild holds a shard, then finds it loaded
   * and leaves it: a second load of a loaded sale changes nothing.
   * @throws the source's refusal of a shard loaded before; Error when its lock expired before the put
   */
  async load(saleId: number, items: readonly ItemQuantity[], source: StockSource): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    const token = `${LOAD}${randomUUID()}`;
    const locks = new ShardLocks(this.redis, layout);
    for (const k of layout.tags.keys()) {
      if (!(await locks.lockWhenFree(k, token))) continue;
      try {
        const { epochs, liveOrders, mark } = await source.firstLoad([k]);
        if (!(await this.staging.putInPlace(layout, k, token, epochOf(epochs, k), carried(layout, items, k), liveOrders, [], [], mark, () => source.undoFirstLoad([k])))) {
          throw new Error(`sale ${saleId} shard ${k}: the load's lock expired before its stock went in place; load again`);
        }
      } finally {
        await locks.unlock(k, token);
      }
    }
  }

  /**
   * Rebuilds the given shards (those that lost their data), under their locks, once their epochs moved on: each
   * from PostgreSQL's live orders and the other shards' reservations: its stock (its run less the units live
   * orders from it hold), the reservations of those orders, the buyers homed on it (from the live orders, and
   * from the reservations on the other shards of orders PostgreSQL does not have yet), no claims; and a start
   * queue entry for each of its live orders, whose workflow may never have started (an order paid through the
   * route before its start: its entry went with the shard); a start that finds the workflow changes nothing.
   * The other shards are not rewritten; a buyer's entry there that names an order held nowhere any more (it was
   * only on a lost shard) is cleared, as an undone claim would be.
   * Until a lost shard is rebuilt, its missing loaded mark keeps reserve, claim, unclaim and release from writing
   * there (they refuse, and are tried again).
   * @param lost the shards to rebuild
   * @throws RebuildUnderWay when another rebuild holds a shard's lock (a load's it waits for), or it was rebuilt since `lost` was found
   */
  async rebuild(saleId: number, items: readonly ItemQuantity[], source: StockSource, lost: readonly number[]): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    const token = `${REBUILD}${randomUUID()}`;
    const locks = new ShardLocks(this.redis, layout);
    const locked: number[] = [];
    try {
      for (const k of lost) {
        // A load holds a shard for as long as it stages its units: wait for it. Another rebuild is refused.
        while (!(await locks.lock(k, token))) {
          const holder = await locks.holder(k);
          if (holder?.startsWith(REBUILD)) throw new RebuildUnderWay(`shard ${k}: another rebuild is under way`);
          await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
        }
        locked.push(k);
        if ((await this.holding(saleId))[k]) throw new RebuildUnderWay(`shard ${k}: rebuilt meanwhile`);
      }
      const { epochs, liveOrders, mark, cancelled = [] } = await source.nextEpoch(lost);
      const isLost = (k: number) => lost.includes(k);
      const elsewhere = (await this.store.view.reservations(saleId)).filter((o) => !isLost(o.stockShard ?? 0));
      const known = new Set(liveOrders.map((o) => o.orderId));
      // A buyer's live order last, so that it names their entry over an ended order whose release is still to come.
      const holders = [...elsewhere.filter((o) => !known.has(o.orderId)), ...liveOrders];
      // Before the lost shards are put in place: a rebuild that dies after them would not run again (every shard
      // would hold its data), and the entries it had to clear would stay.
      await this.clearStranded(saleId, layout, lost, new Set(holders.map((o) => o.orderId)));
      for (const k of lost) {
        const epoch = epochOf(epochs, k);
        const held = liveOrders.filter((o) => (o.stockShard ?? 0) === k).map((o) => ({ ...o, stockEpoch: epoch }));
        await this.requeue(layout, k, [...held, ...cancelled.filter((o) => (o.stockShard ?? 0) === k).map((o) => ({ ...o, stockEpoch: epoch }))]);
        const homed = holders.filter((o) => homeShard(layout, o.userId) === k);
        if (!(await this.staging.putInPlace(layout, k, token, epoch, carried(layout, items, k), liveOrders, held, homed, mark))) {
          throw new RebuildUnderWay(`shard ${k}: lock lost or shard loaded meanwhile`);
        }
      }
    } finally {
      // Only our own lock: one that expired and was taken by another rebuild stays theirs.
      for (const k of locked) await locks.unlock(k, token);
    }
  }

  /**
   * Appends a start queue entry for each order (its workflow may not exist); entries twice are harmless (a start
   * that finds the workflow counts as started, its store finds the row).
   */
  private async requeue(layout: SaleLayout, k: number, orders: readonly OrderInput[]): Promise<void> {
    const queue = shardKeys(layout.tags[k]).startQueue;
    for (let i = 0; i < orders.length; i += PUSH_BATCH) {
      const tx = this.redis.pipeline();
      for (const o of orders.slice(i, i + PUSH_BATCH)) tx.xadd(queue, '*', ...entryFields(o), reservationValue(o));
      await exec(tx);
    }
  }

  /**
   * Clears, on the shards that kept their data, buyers' entries naming an order no shard holds nor claims. Read in
   * this order (entries, then claims, then reservations), a purchase under way is seen in the later reads.
   */
  private async clearStranded(saleId: number, layout: SaleLayout, lost: readonly number[], held: ReadonlySet<string>): Promise<void> {
    const kept = [...layout.tags.keys()].filter((k) => !lost.includes(k));
    const entries = await Promise.all(kept.map(async (k) => ({ k, buyers: Object.entries(await this.redis.hgetall(shardKeys(layout.tags[k]).buyers)) })));
    const claimed = new Set((await this.store.view.claims(saleId)).map((member) => parseClaimMember(member).orderId));
    const reserved = new Set((await this.store.view.reservations(saleId)).map((o) => o.orderId));
    for (const { k, buyers } of entries) {
      const keys = shardKeys(layout.tags[k]);
      for (const [userId, orderId] of buyers) {
        if (held.has(orderId) || claimed.has(orderId) || reserved.has(orderId)) continue;
        // unclaim.lua clears the entry only while it names this order; the claim member it drops does not exist.
        await idempotent(() => this.redis.unclaim(keys.buyers, keys.claims, keys.loaded, userId, orderId, claimMember({ orderId, itemId: 0, userId })));
      }
    }
  }
}

/** @throws Error when PostgreSQL has no epoch for shard k (a sale without its stock_shards rows) */
function epochOf(epochs: ReadonlyMap<number, number>, k: number): number {
  const epoch = epochs.get(k);
  if (epoch === undefined) throw new Error(`stock shard ${k} has no epoch in PostgreSQL (stock_shards)`);
  return epoch;
}

/** @returns the items whose stock shard k carries */
function carried(layout: SaleLayout, items: readonly ItemQuantity[], k: number): ItemQuantity[] {
  return items.filter((item) => itemShardCount(layout, item.itemId) > k);
}
