/**
 * A sale's stock into Redis, and Redis' view of a sale rebuilt from PostgreSQL after a stock shard lost its data.
 * A Redis node loses a shard's keys all at once (no replica took over, or the data went with it), so a shard whose
 * stock keys are all missing has lost its data, and one that holds any has not. A rebuild restores the lost shards
 * only, and never rewrites a shard that holds its data: those hold reservations and buyers' entries of orders that
 * PostgreSQL does not know yet (the starters' backlog), which only they know.
 */
import { randomUUID } from 'node:crypto';
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import { claimMember, parseClaimMember, reservationValue } from './formats';
import { homeShard, itemShardCount, shardKeys, shardQuantity, type SaleLayout } from './layout';
import type { ReservationStore } from './store';

/** Thrown when a shard's rebuild is already under way, or done since its loss was found. */
export class RebuildUnderWay extends Error {}

/** How long a rebuild may hold a shard's lock (ms); it expires after a crash. */
const REBUILD_LOCK_MS = 120_000;
/** Deletes the lock only while it holds the caller's token. */
const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/** An item's quantity, to split over its shards. */
export interface ItemQuantity {
  itemId: number;
  quantity: number;
}

/** Loads and rebuilds sales in Redis, over a store's client. Methods throw ioredis errors when Redis is unreachable. */
export class StockLoader {
  private readonly redis: FlashRedis;

  constructor(private readonly store: ReservationStore) {
    this.redis = store.redis;
  }

  /** @returns per shard of the sale, whether it holds its data: any stock key of the items it carries exists */
  async holding(saleId: number, items: readonly ItemQuantity[]): Promise<boolean[]> {
    const byShard = await this.store.stockByShard(
      saleId,
      items.map((i) => i.itemId),
    );
    const layout = await this.store.layouts.get(saleId);
    return layout.tags.map((_, k) => [...byShard.values()].some((parts) => parts[k] !== undefined));
  }

  /**
   * Sets the stock keys that are missing, shard by shard, and marks each shard loaded: an item's stock on shard k
   * is its part of the quantity (shardQuantity) minus the live orders whose unit that shard gave. Idempotent: a
   * second load changes nothing. A shard that lost its data needs a rebuild instead (src/sale/sales.ts refuses).
   * @param liveOrders the sale's PENDING and PAID orders (PostgreSQL)
   */
  async load(saleId: number, items: readonly ItemQuantity[], liveOrders: readonly OrderInput[]): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    for (const k of layout.tags.keys()) {
      const keys = shardKeys(layout.tags[k]);
      const tx = this.redis.multi();
      for (const item of carried(layout, items, k)) tx.set(keys.stock(item.itemId), left(layout, item, k, liveOrders), 'NX');
      tx.set(keys.loaded, '1');
      await exec(tx);
    }
  }

  /**
   * Rebuilds the given shards (those that lost their data) from PostgreSQL's live orders and the other shards'
   * reservations, each in one MULTI: its stock (its part less the live orders PostgreSQL says it gave), the
   * reservations of those orders, the buyers homed on it (from the live orders, and from the reservations on the
   * other shards of orders PostgreSQL does not have yet), no claims, and its returns count moved on (a buyer who
   * looked before must look again). The other shards are not rewritten; a buyer's entry there that names an order
   * held nowhere any more (it was only on a lost shard) is cleared, as an undone claim would be. Orders that only
   * a lost shard held and no workflow has stored yet are gone with it, and their start queue entries.
   * Until a lost shard is rebuilt, its missing `loaded` mark keeps claim, unclaim and release from writing there
   * (they refuse, and are tried again), so what was read above is what the shard is rebuilt from. One rebuild
   * runs per shard at a time (a lock), and it stops when the shard was rebuilt meanwhile.
   * @param liveOrders the sale's PENDING and PAID orders (PostgreSQL)
   * @param lost the shards to rebuild
   * @throws RebuildUnderWay when another rebuild holds a shard's lock or rebuilt it since `lost` was found
   */
  async rebuild(saleId: number, items: readonly ItemQuantity[], liveOrders: readonly OrderInput[], lost: readonly number[]): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    const token = randomUUID();
    const locked: number[] = [];
    try {
      for (const k of lost) {
        const keys = shardKeys(layout.tags[k]);
        if ((await this.redis.set(keys.rebuilding, token, 'PX', REBUILD_LOCK_MS, 'NX')) !== 'OK') throw new RebuildUnderWay(`shard ${k}: another rebuild is under way`);
        locked.push(k);
        if ((await this.holding(saleId, items))[k]) throw new RebuildUnderWay(`shard ${k}: rebuilt meanwhile`);
      }
      await this.rewrite(saleId, layout, items, liveOrders, lost);
    } finally {
      // Only our own lock: one that expired and was taken by another rebuild stays theirs.
      for (const k of locked) await this.redis.eval(UNLOCK, 1, shardKeys(layout.tags[k]).rebuilding, token).catch(() => undefined);
    }
  }

  private async rewrite(saleId: number, layout: SaleLayout, items: readonly ItemQuantity[], liveOrders: readonly OrderInput[], lost: readonly number[]): Promise<void> {
    const isLost = (k: number) => lost.includes(k);
    const elsewhere = (await this.store.reservations(saleId)).filter((o) => !isLost(o.stockShard ?? 0));
    const known = new Set(liveOrders.map((o) => o.orderId));
    const holders = [...liveOrders, ...elsewhere.filter((o) => !known.has(o.orderId))];
    for (const k of lost) {
      const keys = shardKeys(layout.tags[k]);
      const here = carried(layout, items, k);
      const homed = holders.filter((o) => homeShard(layout, o.userId) === k);
      const held = liveOrders.filter((o) => (o.stockShard ?? 0) === k);
      const tx = this.redis.multi();
      tx.del(keys.buyers, keys.reservations, keys.claims, ...here.map((item) => keys.stock(item.itemId)));
      if (homed.length) tx.hset(keys.buyers, Object.fromEntries(homed.map((o) => [o.userId, o.orderId])));
      if (held.length) tx.hset(keys.reservations, Object.fromEntries(held.map((o) => [o.orderId, reservationValue(o)])));
      for (const item of here) {
        tx.set(keys.stock(item.itemId), left(layout, item, k, liveOrders));
        tx.set(keys.returns(item.itemId), Date.now());
      }
      tx.set(keys.loaded, '1');
      await exec(tx);
    }
    await this.clearStranded(saleId, layout, lost, new Set(holders.map((o) => o.orderId)));
  }

  /**
   * Clears, on the shards that kept their data, buyers' entries naming an order no shard holds nor claims. Read in
   * this order (entries, then claims, then reservations), a purchase under way is seen in the later reads.
   */
  private async clearStranded(saleId: number, layout: SaleLayout, lost: readonly number[], held: ReadonlySet<string>): Promise<void> {
    const kept = [...layout.tags.keys()].filter((k) => !lost.includes(k));
    const entries = await Promise.all(kept.map(async (k) => ({ k, buyers: Object.entries(await this.redis.hgetall(shardKeys(layout.tags[k]).buyers)) })));
    const claimed = new Set((await this.store.claims(saleId)).map((member) => parseClaimMember(member).orderId));
    const reserved = new Set((await this.store.reservations(saleId)).map((o) => o.orderId));
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

/** @returns the items whose stock shard k carries */
function carried(layout: SaleLayout, items: readonly ItemQuantity[], k: number): ItemQuantity[] {
  return items.filter((item) => itemShardCount(layout, item.itemId) > k);
}

/** @returns an item's stock on shard k: its part less the live orders whose unit that shard gave */
function left(layout: SaleLayout, item: ItemQuantity, k: number, liveOrders: readonly OrderInput[]): number {
  const taken = liveOrders.filter((o) => o.itemId === item.itemId && (o.stockShard ?? 0) === k).length;
  return shardQuantity(item.quantity, itemShardCount(layout, item.itemId), k) - taken;
}

async function exec(tx: ReturnType<FlashRedis['multi']>): Promise<void> {
  const failed = ((await tx.exec()) ?? []).find(([err]) => err);
  if (failed) throw failed[0];
}
