/**
 * A sale's stock into Redis, and Redis' view of a sale rebuilt after a stock shard lost its data. A Redis node
 * loses a shard's keys all at once (no replica took over, or the data went with it), so a shard without its
 * loaded mark has lost its data (or was never loaded), and one that holds it has not. A shard's stock is its free
 * units, numbered (layout.ts shardUnits): its run of units less those live orders hold.
 *
 * Every order that may hold a unit is known to one of two stores: PostgreSQL from the moment a starter reads its
 * start queue entry (the starter stores the order before it starts its workflow, src/starter/starter.ts), Redis
 * before that (its reservation and entry, on the shard it was taken from). A rebuild restores the lost shards from
 * PostgreSQL's live orders and the kept shards' reservations, and never rewrites a shard that holds its data.
 * What only a lost shard knew (entries no starter had read) is gone with it.
 *
 * Loads and rebuilds of a shard are exclusive (its lock), and each puts its work in place in one script that
 * checks, as it writes, that it still holds the lock and the shard is still unloaded. Each first moves the shard's
 * epoch on in PostgreSQL (src/sale/sales.ts, StockSource) and only then reads the live orders: an order a starter
 * read before and stores after carries the old epoch, and PostgreSQL refuses to store it live (src/order/store.ts).
 */
import { randomUUID } from 'node:crypto';
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import { claimMember, entryFields, parseClaimMember, reservationValue } from './formats';
import { homeShard, itemShardCount, shardKeys, shardUnits, type SaleLayout } from './layout';
import type { ReservationStore } from './store';

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
  firstLoad(shards: readonly number[]): Promise<{ epochs: ReadonlyMap<number, number>; liveOrders: OrderInput[] }>;
  /**
   * Undoes firstLoad (epoch 1 back to 0) for a load that failed before anything went in place: no unit was handed
   * out in epoch 1, and a plain load may try again.
   */
  undoFirstLoad(shards: readonly number[]): Promise<void>;
  /** A rebuild: each shard's next epoch. @returns the shards' new epochs and the sale's live orders */
  nextEpoch(shards: readonly number[]): Promise<{ epochs: ReadonlyMap<number, number>; liveOrders: OrderInput[] }>;
}

/** How long a load or rebuild may hold a shard's lock (ms); it expires after a crash. */
const LOCK_MS = 120_000;
/** A lock's token says who holds it: a rebuild waits for a load, and refuses to run beside another rebuild. */
const LOAD = 'load:';
const REBUILD = 'rebuild:';
/** How often a load or a rebuild looks again at a shard another holds (ms). */
const LOCK_POLL_MS = 100;
/** Deletes the lock only while it holds the caller's token. */
const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/**
 * Puts one shard's staged keys in place, in one step, while the caller holds its lock and it has no loaded mark;
 * else drops them and returns 0. Staged keys are filled beforehand (stage), so no script of a load pushes a
 * whole quantity while every other command of the node waits; this one renames.
 * KEYS: the loaded mark, the lock, the claims, then pairs (staged, live) for the buyers' entries, the
 * reservations and each item's stock list, then each item's returns count. ARGV: the lock's token, the epoch,
 * now (ms), the number of items. A pair without a staged key empties the live one (an item with no free unit,
 * a shard with no order). A renamed key keeps its staging expiry, which PERSIST lifts. The returns counts move on
 * (a buyer who found the shard empty before must look again).
 */
const PUT_IN_PLACE = `local loaded, lock, claims = KEYS[1], KEYS[2], KEYS[3]
local items = tonumber(ARGV[4])
local pairsEnd = 3 + 2 * (2 + items)
if redis.call('GET', lock) ~= ARGV[1] or redis.call('EXISTS', loaded) == 1 then
  for i = 4, pairsEnd, 2 do redis.call('DEL', KEYS[i]) end
  return 0
end
redis.call('DEL', claims)
for i = 4, pairsEnd, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    redis.call('PERSIST', KEYS[i + 1])
  else
    redis.call('DEL', KEYS[i + 1])
  end
end
for i = pairsEnd + 1, #KEYS do redis.call('SET', KEYS[i], ARGV[3]) end
redis.call('SET', loaded, ARGV[2])
return 1`;
/** Units (or hash fields) written per command while staging. */
const PUSH_BATCH = 10_000;
/** How long a staged key outlives a load that crashed before putting it in place (ms). */
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
   * Loads every shard not loaded yet, for the first time (source.firstLoad refuses a shard loaded before): each
   * item's run of units on it. A load waits while another load or a rebuild holds a shard, then finds it loaded
   * and leaves it: a second load of a loaded sale changes nothing.
   * @throws the source's refusal of a shard loaded before; Error when its lock expired before the put
   */
  async load(saleId: number, items: readonly ItemQuantity[], source: StockSource): Promise<void> {
    const layout = await this.store.layouts.get(saleId);
    const token = `${LOAD}${randomUUID()}`;
    for (const k of layout.tags.keys()) {
      if (!(await this.lockWhenFree(layout, k, token))) continue;
      try {
        const { epochs, liveOrders } = await source.firstLoad([k]);
        if (!(await this.putInPlace(layout, k, token, epochOf(epochs, k), carried(layout, items, k), liveOrders, [], [], () => source.undoFirstLoad([k])))) {
          throw new Error(`sale ${saleId} shard ${k}: the load's lock expired before its stock went in place; load again`);
        }
      } finally {
        await this.unlock(layout, k, token);
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
    const locked: number[] = [];
    try {
      for (const k of lost) {
        // A load holds a shard for as long as it stages its units: wait for it. Another rebuild is refused.
        while (!(await this.lock(layout, k, token))) {
          const holder = await this.redis.get(shardKeys(layout.tags[k]).rebuilding);
          if (holder?.startsWith(REBUILD)) throw new RebuildUnderWay(`shard ${k}: another rebuild is under way`);
          await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
        }
        locked.push(k);
        if ((await this.holding(saleId))[k]) throw new RebuildUnderWay(`shard ${k}: rebuilt meanwhile`);
      }
      const { epochs, liveOrders } = await source.nextEpoch(lost);
      const isLost = (k: number) => lost.includes(k);
      const elsewhere = (await this.store.reservations(saleId)).filter((o) => !isLost(o.stockShard ?? 0));
      const known = new Set(liveOrders.map((o) => o.orderId));
      // A buyer's live order last, so that it names their entry over an ended order whose release is still to come.
      const holders = [...elsewhere.filter((o) => !known.has(o.orderId)), ...liveOrders];
      // Before the lost shards are put in place: a rebuild that dies after them would not run again (every shard
      // would hold its data), and the entries it had to clear would stay.
      await this.clearStranded(saleId, layout, lost, new Set(holders.map((o) => o.orderId)));
      for (const k of lost) {
        const epoch = epochOf(epochs, k);
        const held = liveOrders.filter((o) => (o.stockShard ?? 0) === k).map((o) => ({ ...o, stockEpoch: epoch }));
        await this.requeue(layout, k, held);
        const homed = holders.filter((o) => homeShard(layout, o.userId) === k);
        if (!(await this.putInPlace(layout, k, token, epoch, carried(layout, items, k), liveOrders, held, homed))) {
          throw new RebuildUnderWay(`shard ${k}: lock lost or shard loaded meanwhile`);
        }
      }
    } finally {
      // Only our own lock: one that expired and was taken by another rebuild stays theirs.
      for (const k of locked) await this.unlock(layout, k, token);
    }
  }

  private async lock(layout: SaleLayout, k: number, token: string): Promise<boolean> {
    return (await this.redis.set(shardKeys(layout.tags[k]).rebuilding, token, 'PX', LOCK_MS, 'NX')) === 'OK';
  }

  private async unlock(layout: SaleLayout, k: number, token: string): Promise<void> {
    await this.redis.eval(UNLOCK, 1, shardKeys(layout.tags[k]).rebuilding, token).catch(() => undefined);
  }

  /** @returns whether shard k is locked for this load (false: it is loaded, by another load or a rebuild meanwhile) */
  private async lockWhenFree(layout: SaleLayout, k: number, token: string): Promise<boolean> {
    const loaded = async () => (await idempotent(() => this.redis.exists(shardKeys(layout.tags[k]).loaded))) === 1;
    for (;;) {
      if (await loaded()) return false;
      if (await this.lock(layout, k, token)) {
        if (!(await loaded())) return true;
        await this.unlock(layout, k, token);
        return false;
      }
      await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
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
   * Stages shard k's free units per item, and (a rebuild) its reservations and buyers' entries, in keys of this
   * call's own, then puts them in place (PUT_IN_PLACE).
   * @param held the live orders whose unit this shard gave, with its new epoch (their reservations)
   * @param homed the orders whose buyer is homed on this shard (their buyers' entries)
   * @param onStagingFailed run when staging fails, before the error is thrown (nothing went in place)
   * @returns whether they went in place (false: the lock was lost, or the shard loaded meanwhile)
   */
  private async putInPlace(
    layout: SaleLayout,
    k: number,
    token: string,
    epoch: number,
    here: readonly ItemQuantity[],
    liveOrders: readonly OrderInput[],
    held: readonly OrderInput[],
    homed: readonly OrderInput[],
    onStagingFailed?: () => Promise<void>,
  ): Promise<boolean> {
    const keys = shardKeys(layout.tags[k]);
    const staged = (key: string) => `${key}:staged:${token}`;
    const pairs: [string, string][] = [];
    try {
      await this.stageHash(staged(keys.buyers), homed.map((o) => [o.userId, o.orderId]));
      pairs.push([staged(keys.buyers), keys.buyers]);
      await this.stageHash(staged(keys.reservations), held.map((o) => [o.orderId, reservationValue(o)]));
      pairs.push([staged(keys.reservations), keys.reservations]);
      for (const item of here) {
        const stock = keys.stock(item.itemId);
        const units = free(layout, item, k, liveOrders);
        // Not rerun on a lost reply (a push twice would list units twice): a failure fails the load, whose staged keys expire.
        for (let i = 0; i < units.length; i += PUSH_BATCH) await exec(this.redis.multi().rpush(staged(stock), ...units.slice(i, i + PUSH_BATCH)).pexpire(staged(stock), STAGED_TTL_MS));
        pairs.push([staged(stock), stock]);
      }
    } catch (err) {
      // Nothing went in place, so no unit was handed out in this epoch: a first load may be tried again as one.
      await onStagingFailed?.().catch(() => undefined);
      throw err;
    }
    const keysOf = [keys.loaded, keys.rebuilding, keys.claims, ...pairs.flat(), ...here.map((item) => keys.returns(item.itemId))];
    const put = await this.redis.eval(PUT_IN_PLACE, keysOf.length, ...keysOf, token, String(epoch), String(Date.now()), String(here.length));
    return put === 1;
  }

  private async stageHash(key: string, fields: readonly [string, string][]): Promise<void> {
    for (let i = 0; i < fields.length; i += PUSH_BATCH) {
      await exec(this.redis.multi().hset(key, Object.fromEntries(fields.slice(i, i + PUSH_BATCH))).pexpire(key, STAGED_TTL_MS));
    }
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

/** @returns an item's free units on shard k: its run of units less those the live orders from that shard hold */
function free(layout: SaleLayout, item: ItemQuantity, k: number, liveOrders: readonly OrderInput[]): number[] {
  const held = new Set(liveOrders.filter((o) => o.itemId === item.itemId && (o.stockShard ?? 0) === k).map((o) => o.unit));
  return shardUnits(item.quantity, itemShardCount(layout, item.itemId), k).filter((unit) => !held.has(unit));
}

async function exec(tx: ReturnType<FlashRedis['multi']> | ReturnType<FlashRedis['pipeline']>): Promise<void> {
  const failed = ((await tx.exec()) ?? []).find(([err]) => err);
  if (failed) throw failed[0];
}
