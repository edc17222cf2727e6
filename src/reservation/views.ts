/**
 * What Redis holds for a sale, read without changing it: free units per stock shard, the reservations, the buyers'
 * entries and the claims in progress, over every shard of the sale (src/reservation/layout.ts). The audit, the
 * admin routes, the loader and the tests read through it; ReservationStore, the writes, carries one as `view`.
 */
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import { parseReservation } from './formats';
import { homeShard, itemShardCount, LayoutError, shardKeys, tagOf, type LayoutSource, type SaleLayout } from './layout';

/** Reads of a sale's reservation keys. Methods throw ioredis errors when Redis stays unreachable. */
export class ReservationView {
  constructor(
    /** The client it runs on, which src/reservation/loading.ts shares. */
    readonly redis: FlashRedis,
    readonly layouts: LayoutSource,
  ) {}

  /** @returns per item id, the stock (free units) of each of its shards (undefined where a shard is not loaded) */
  async stockByShard(saleId: number, itemIds: readonly number[]): Promise<Map<number, (number | undefined)[]>> {
    const free = await this.freeUnits(saleId, itemIds, (tx, key) => tx.llen(key));
    return new Map([...free].map(([id, parts]) => [id, parts.map((n) => (n === undefined ? undefined : Number(n)))]));
  }

  /** @returns per item id, the free unit numbers of each of its shards in the order they are handed out (undefined where a shard is not loaded) */
  async unitsByShard(saleId: number, itemIds: readonly number[]): Promise<Map<number, (number[] | undefined)[]>> {
    const free = await this.freeUnits(saleId, itemIds, (tx, key) => tx.lrange(key, 0, -1));
    return new Map([...free].map(([id, parts]) => [id, parts.map((units) => (units === undefined ? undefined : (units as string[]).map(Number)))]));
  }

  /** Reads each loaded shard's free-unit list of each item with `read`, in one MULTI per shard with its loaded mark. */
  private async freeUnits(saleId: number, itemIds: readonly number[], read: (tx: ReturnType<FlashRedis['multi']>, key: string) => unknown): Promise<Map<number, unknown[]>> {
    const layout = await this.layouts.get(saleId);
    const out = new Map(itemIds.map((id) => [id, [] as unknown[]]));
    await Promise.all(
      layout.tags.map(async (tag, k) => {
        const here = itemIds.filter((id) => itemShardCount(layout, id) > k);
        if (!here.length) return;
        const keys = shardKeys(tag);
        const replies = await idempotent(() => {
          const tx = this.redis.multi().exists(keys.loaded);
          for (const id of here) read(tx, keys.stock(id));
          return tx.exec();
        });
        const [[, loaded], ...values] = replies as [Error | null, unknown][];
        here.forEach((id, i) => ((out.get(id) as unknown[])[k] = loaded === 1 ? values[i][1] : undefined));
      }),
    );
    return out;
  }

  /** @returns the stock per item id, summed over its shards; undefined when any of its shards is not loaded */
  async stock(saleId: number, itemIds: readonly number[]): Promise<Map<number, number | undefined>> {
    const byShard = await this.stockByShard(saleId, itemIds);
    return new Map(
      [...byShard].map(([id, parts]) => [id, parts.length && parts.every((p) => p !== undefined) ? parts.reduce((a: number, p) => a + (p as number), 0) : undefined]),
    );
  }

  /**
   * @returns the order held by its reservation in its sale, with its terms, or undefined when the sale holds none
   *   for orderId, or does not exist (an order id names its sale: anyone may send one naming no sale)
   */
  async findReservation(saleId: number, orderId: string): Promise<OrderInput | undefined> {
    let layout: SaleLayout;
    try {
      layout = await this.layouts.get(saleId);
    } catch (err) {
      if (err instanceof LayoutError) return undefined;
      throw err;
    }
    const values = await Promise.all(layout.tags.map((tag) => idempotent(() => this.redis.hget(shardKeys(tag).reservations, orderId))));
    const k = values.findIndex((v) => v !== null);
    return k < 0 ? undefined : parseReservation(saleId, k, orderId, values[k] as string);
  }

  /**
   * @returns whether the buyer's entry on their home shard (I3) still names this order: a press of theirs is
   *   answered 409 naming it until its release clears the entry (lua/release.lua, with its unit back)
   */
  async holdsBuyer(saleId: number, userId: string, orderId: string): Promise<boolean> {
    const layout = await this.layouts.get(saleId);
    const keys = shardKeys(tagOf(layout, homeShard(layout, userId)));
    return (await idempotent(() => this.redis.hget(keys.buyers, userId))) === orderId;
  }

  /** @returns every order holding a reservation in the sale (PENDING and PAID), on every shard, read with HSCAN in pages */
  async reservations(saleId: number): Promise<OrderInput[]> {
    const layout = await this.layouts.get(saleId);
    const out: OrderInput[] = [];
    for (const [k, tag] of layout.tags.entries()) {
      const stream = this.redis.hscanStream(shardKeys(tag).reservations, { count: 1000 });
      for await (const page of stream as AsyncIterable<string[]>) {
        for (let i = 0; i < page.length; i += 2) out.push(parseReservation(saleId, k, page[i], page[i + 1]));
      }
    }
    return out;
  }

  /** @returns per buyer, the order their home shard records (I3), over all shards of the sale */
  async buyers(saleId: number): Promise<Map<string, string>> {
    const layout = await this.layouts.get(saleId);
    const out = new Map<string, string>();
    for (const tag of layout.tags) for (const [userId, orderId] of Object.entries(await this.redis.hgetall(shardKeys(tag).buyers))) out.set(userId, orderId);
    return out;
  }

  /** @returns the claims in progress (claim.lua) on every shard of the sale, as claim members; none at rest */
  async claims(saleId: number): Promise<string[]> {
    const layout = await this.layouts.get(saleId);
    return (await Promise.all(layout.tags.map((tag) => this.redis.zrange(shardKeys(tag).claims, 0, -1)))).flat();
  }
}
