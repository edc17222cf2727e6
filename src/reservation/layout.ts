/**
 * Where a sale lives in Redis: S stock shards, each one hash tag (one slot), placed on distinct masters of a
 * cluster. An item of s ≤ S shards splits its numbered units over shards 0..s−1 (shardUnits); a buyer's home
 * shard, crc32(userId) mod S, holds their live order for the whole sale (I3). Fixed when the sale is made, so
 * cached for good once read.
 */
import { crc32 } from 'node:zlib';
import type { Pool } from 'pg';

/** Stock shards an item may ask for at most (a sale's shards are bounded the same). */
export const MAX_SHARDS = 64;

/** A sale's stock shards: one hash tag per shard, and each item's number of stock shards (1..tags.length). */
export interface SaleLayout {
  saleId: number;
  tags: readonly string[];
  itemShards: ReadonlyMap<number, number>;
}

/** Thrown when a sale or an item is not in PostgreSQL, or a layout cannot be placed. */
export class LayoutError extends Error {}

/** @returns the tag of a sale's shard 0, the tag of every key of a one-shard sale */
export function baseTag(saleId: number): string {
  return `{sale:${saleId}}`;
}

/** Redis keys of one shard; every key carries the shard's hash tag (one slot). */
export function shardKeys(tag: string) {
  return {
    /** Live order per buyer homed on this shard: hash userId → orderId (I3). */
    buyers: `${tag}:buyers`,
    /** Orders whose unit this shard's stock gave: hash orderId → reservation value (src/reservation/formats.ts). */
    reservations: `${tag}:reservations`,
    /** Stream of orders reserved on this shard whose workflow is still to be started (consumer group: the starters). */
    startQueue: `${tag}:accepted`,
    /** Buyers homed here whose unit is being sought on another shard: sorted set of claim members (formats.ts) by claim time (ms, Redis' clock). */
    claims: `${tag}:claims`,
    /**
     * Set by a load or a rebuild, with the shard's stock: a node that restarted empty has none, and claim, unclaim
     * and release refuse to run on a shard without it (nor the stock or buyers' entries they touch), so that
     * nothing is written there between a data loss and the rebuild.
     */
    loaded: `${tag}:loaded`,
    /**
     * The sale's state on this shard (sale controls, src/sale/controls.ts): 'OPEN', or 'PAUSED' or 'ENDED' (purchases
     * refused). Written by every load, so that while a slot moves every key a reservation names exists on one side:
     * a script naming a key that exists on neither is answered TRYAGAIN by the importing node and ASK by the other.
     */
    closed: `${tag}:closed`,
    /**
     * Shard channel (SPUBLISH, SSUBSCRIBE), not a key: told an item's id whenever a unit comes back to its empty free
     * list on this shard (release.lua, repair.lua, which name it from `loaded`), so that every API process clears its
     * sold-out flag at once (src/api/soldOut.ts).
     */
    restocked: `${tag}:restocked`,
    /** Orders whose unit this shard took back (release.lua), for a day after the last: a late rerun of their reservation reserves nothing. */
    released: `${tag}:released`,
    /** A rebuild of this shard under way (src/reservation/loading.ts): its token, until it ends or the lock expires. */
    rebuilding: `${tag}:rebuilding`,
    /** The reconciler that holds this shard (src/reservation/reconciler.ts): its token, until its lease runs out. */
    reconciler: `${tag}:reconciler`,
    /** Shard 0's: the process that took the sale's full pass this period (src/reservation/reconciler.ts). */
    fullPass: `${tag}:fullpass`,
    /**
     * The item's free units on this shard: a list of unit numbers (shardUnits), handed out from its head by the
     * reserving scripts and given back at its tail by release.lua. Absent when none is left: the loaded mark, not
     * this key, says whether the shard holds its data.
     */
    stock: (itemId: number) => `${tag}:stock:${itemId}`,
    /**
     * Units of the item returned to this shard's stock, counted by every release (and moved on by a rebuild): a
     * buyer who found the shard empty tells from it whether a unit came back since (SOLD_OUT across shards).
     */
    returns: (itemId: number) => `${tag}:returns:${itemId}`,
  };
}

/** Redis keys of shard 0 of a sale, the only shard of a one-shard sale. */
export function saleKeys(saleId: number) {
  return shardKeys(baseTag(saleId));
}

/** @throws LayoutError when the layout has no shard k (an order naming a shard its sale does not have) */
export function tagOf(layout: SaleLayout, k: number): string {
  const tag = layout.tags[k];
  if (tag === undefined) throw new LayoutError(`sale ${layout.saleId} has no stock shard ${k}`);
  return tag;
}

/** @returns the buyer's home shard, 0..shards−1: where their live order of the sale is recorded (I3) */
export function homeShard(layout: SaleLayout, userId: string): number {
  return layout.tags.length === 1 ? 0 : crc32(userId) % layout.tags.length;
}

/** @returns how many stock shards the item has (1 for an item the layout does not name: one made before shards) */
export function itemShardCount(layout: SaleLayout, itemId: number): number {
  return layout.itemShards.get(itemId) ?? 1;
}

/**
 * @returns the part of quantity shard k of s holds: quantity split as evenly as it goes, the first shards taking
 *   one more when it does not divide
 */
export function shardQuantity(quantity: number, shards: number, k: number): number {
  return Math.floor(quantity / shards) + (k < quantity % shards ? 1 : 0);
}

/**
 * The unit numbers shard k of s holds at load: a run of shardQuantity(quantity, s, k) consecutive numbers, after
 * those of shards 0..k−1, so that the item's units are 1..quantity, each on one shard (orders.unit, I1). The
 * migration that numbered orders from before units (migrations/1764800000000_unit-slots.mjs) counts the same.
 * @returns the shard's units, ascending
 */
export function shardUnits(quantity: number, shards: number, k: number): number[] {
  const first = k * Math.floor(quantity / shards) + Math.min(k, quantity % shards) + 1;
  return Array.from({ length: shardQuantity(quantity, shards, k) }, (_, i) => first + i);
}

/**
 * Chooses the sale's shard tags: shard 0 is `{sale:<id>}`; shard k is `{sale:<id>:<k>:<n>}` with the smallest n
 * whose slot a master owns that no earlier shard's does, when ownerOf tells owners (a cluster), else n = 0.
 * @param ownerOf the master owning a tag's slot (cluster), or undefined for a single node
 * @param masters how many masters the cluster has
 * @throws LayoutError when there are more shards than masters on a cluster (two would share one)
 */
export function placeTags(saleId: number, shards: number, ownerOf?: (tag: string) => string | undefined, masters = 1): string[] {
  const tags = [baseTag(saleId)];
  if (!ownerOf) {
    for (let k = 1; k < shards; k++) tags.push(`{sale:${saleId}:${k}:0}`);
    return tags;
  }
  if (shards > masters) throw new LayoutError(`${shards} stock shards need as many masters; the cluster has ${masters}`);
  const used = new Set([ownerOf(tags[0])]);
  for (let k = 1; k < shards; k++) {
    for (let n = 0; ; n++) {
      const tag = `{sale:${saleId}:${k}:${n}}`;
      const owner = ownerOf(tag);
      if (owner !== undefined && !used.has(owner)) {
        used.add(owner);
        tags.push(tag);
        break;
      }
      if (n > 100_000) throw new LayoutError(`no tag of shard ${k} lands on a free master`);
    }
  }
  return tags;
}

/** Where a sale's layout comes from: SaleLayouts (PostgreSQL, cached), or a fixed one in unit tests. */
export interface LayoutSource {
  /** @throws LayoutError when the sale does not exist */
  get(saleId: number): Promise<SaleLayout>;
}

/** The layouts of sales, read from PostgreSQL once per sale (they never change). */
export class SaleLayouts implements LayoutSource {
  private readonly cache = new Map<number, Promise<SaleLayout>>();

  constructor(private readonly pool: Pool) {}

  /** @throws LayoutError when the sale does not exist (not cached: it may be made later) */
  get(saleId: number): Promise<SaleLayout> {
    let layout = this.cache.get(saleId);
    if (!layout) {
      layout = this.read(saleId);
      this.cache.set(saleId, layout);
      layout.catch(() => this.cache.delete(saleId));
    }
    return layout;
  }

  private async read(saleId: number): Promise<SaleLayout> {
    const res = await this.pool.query<{ tags: string[] | null; itemId: number | null; shards: number | null }>(
      `SELECT s.shard_tags AS tags, i.id AS "itemId", i.stock_shards AS shards
       FROM sale_events s LEFT JOIN items i ON i.sale_id = s.id WHERE s.id = $1`,
      [saleId],
    );
    if (!res.rowCount) throw new LayoutError(`sale ${saleId} does not exist`);
    const itemShards = new Map(res.rows.filter((r) => r.itemId !== null).map((r) => [r.itemId as number, r.shards as number]));
    return { saleId, tags: res.rows[0].tags ?? [baseTag(saleId)], itemShards };
  }
}
