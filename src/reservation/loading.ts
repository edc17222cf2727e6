/**
 * A sale's stock into Redis, and Redis' view of a sale rebuilt from PostgreSQL after a stock shard lost its data.
 * A Redis node loses a shard's keys all at once (no replica took over, or the data went with it), so a shard
 * without its loaded mark has lost its data (or was never loaded), and one that holds it has not. A shard's stock
 * is its free units, numbered (layout.ts shardUnits): its run of units less those live orders hold. A rebuild restores the lost shards
 * only, and never rewrites a shard that holds its data: those hold reservations and buyers' entries of orders that
 * PostgreSQL does not know yet (the starters' backlog), which only they know.
 */
import { randomUUID } from 'node:crypto';
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import { claimMember, parseClaimMember, reservationValue } from './formats';
import { homeShard, itemShardCount, shardKeys, shardUnits, type SaleLayout } from './layout';
import type { ReservationStore } from './store';

/** Thrown when a shard's rebuild is already under way, or done since its loss was found. */
export class RebuildUnderWay extends Error {}

/** How long a rebuild may hold a shard's lock (ms); it expires after a crash. */
const REBUILD_LOCK_MS = 120_000;
/** Deletes the lock only while it holds the caller's token. */
const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/**
 * Puts one shard's staged unit lists in place unless it is loaded: KEYS[1] its loaded mark, then pairs (staged list,
 * stock list) per item it carries. Staged lists are filled beforehand (stage), so no script or transaction of a
 * load pushes the whole quantity while every other command of the node waits; this one only renames. Of two loads
 * at once, the first to get here loads the shard and the other drops its staged lists (a unit listed twice would
 * be handed out twice). A pair without a staged list is an item with no free unit there. A renamed list keeps its
 * staging expiry, which PERSIST lifts.
 */
const PUT_IN_PLACE = `if redis.call('EXISTS', KEYS[1]) == 1 then
  for i = 2, #KEYS, 2 do redis.call('DEL', KEYS[i]) end
  return 0
end
for i = 2, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    redis.call('PERSIST', KEYS[i + 1])
  else
    redis.call('DEL', KEYS[i + 1])
  end
end
redis.call('SET', KEYS[1], '1')
return 1`;
/** Units pushed per RPUSH while staging a shard's lists. */
const PUSH_BATCH = 10_000;
/** How long a staged list outlives a load that crashed before putting it in place (ms). */
const STAGED_TTL_MS = 600_000;

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

  /** @returns per shard of the sale, whether it holds its data: its loaded mark exists */
  async holding(saleId: number): Promise<boolean[]> {
    const layout = await this.store.layouts.get(saleId);
    return Promise.all(layout.tags.map(async (tag) => (await idempotent(() => this.redis.exists(shardKeys(tag).loaded))) === 1));
  }

  /**
   * Loads every shard not loaded yet: an item's stock on shard k is its run of units (shardUnits) less those the
   * live orders from that shard hold, staged in lists of their own and then put in place with the shard's loaded
   * mark, in one script. Idempotent: a second load changes nothing. A shard that lost its data needs a rebuild
   * instead (src/sale/sales.ts refuses).
   * @param liveOrders the sale's PENDING and PAID orders (PostgreSQL)
   */
  async load(saleId: number, items: readonly ItemQuantity[], liveOrders: readonly OrderInput[]): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    const holding = await this.holding(saleId);
    for (const k of layout.tags.keys()) {
      if (holding[k]) continue;
      const keys = shardKeys(layout.tags[k]);
      const staged = await this.stage(layout, k, carried(layout, items, k), liveOrders);
      await idempotent(() => this.redis.eval(PUT_IN_PLACE, 1 + 2 * staged.length, keys.loaded, ...staged.flat()));
    }
  }

  /**
   * Pushes the free units of each item shard k carries into a list of this load's own (a fresh token), in batches.
   * Not rerun on a lost reply (a push twice would list units twice): a failure fails the load, whose staged lists
   * expire.
   * @returns per item, [staged list, stock list]
   */
  private async stage(layout: SaleLayout, k: number, here: readonly ItemQuantity[], liveOrders: readonly OrderInput[]): Promise<[string, string][]> {
    const keys = shardKeys(layout.tags[k]);
    const token = randomUUID();
    const pairs: [string, string][] = [];
    for (const item of here) {
      const stock = keys.stock(item.itemId);
      const staged = `${stock}:staged:${token}`;
      const units = free(layout, item, k, liveOrders);
      for (let i = 0; i < units.length; i += PUSH_BATCH) await exec(this.redis.multi().rpush(staged, ...units.slice(i, i + PUSH_BATCH)).pexpire(staged, STAGED_TTL_MS));
      pairs.push([staged, stock]);
    }
    return pairs;
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
        if ((await this.holding(saleId))[k]) throw new RebuildUnderWay(`shard ${k}: rebuilt meanwhile`);
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
      const staged = await this.stage(layout, k, here, liveOrders);
      const tx = this.redis.multi();
      tx.del(keys.buyers, keys.reservations, keys.claims, ...here.map((item) => keys.stock(item.itemId)));
      if (homed.length) tx.hset(keys.buyers, Object.fromEntries(homed.map((o) => [o.userId, o.orderId])));
      if (held.length) tx.hset(keys.reservations, Object.fromEntries(held.map((o) => [o.orderId, reservationValue(o)])));
      for (const item of here) tx.set(keys.returns(item.itemId), Date.now());
      // The lock keeps other rebuilds out, and the shard has no loaded mark: the staged lists go in place as they are.
      tx.eval(PUT_IN_PLACE, 1 + 2 * staged.length, keys.loaded, ...staged.flat());
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

/** @returns an item's free units on shard k: its run of units less those the live orders from that shard hold */
function free(layout: SaleLayout, item: ItemQuantity, k: number, liveOrders: readonly OrderInput[]): number[] {
  const held = new Set(liveOrders.filter((o) => o.itemId === item.itemId && (o.stockShard ?? 0) === k).map((o) => o.unit));
  return shardUnits(item.quantity, itemShardCount(layout, item.itemId), k).filter((unit) => !held.has(unit));
}

async function exec(tx: ReturnType<FlashRedis['multi']>): Promise<void> {
  const failed = ((await tx.exec()) ?? []).find(([err]) => err);
  if (failed) throw failed[0];
}
