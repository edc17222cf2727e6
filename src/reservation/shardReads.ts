/**
 * The reconciler's reads of a sale's stock shards (src/reservation/reconciler.ts), in the order drift.ts relies on,
 * without holding a node for a whole hash (HSCAN in pages).
 */
import { idempotent, type FlashRedis } from './client';
import { parseMark } from './closing';
import type { ItemUnits, ShardView } from './drift';
import { parseClaimMember, parseReservation } from './formats';
import { itemShardCount, shardKeys, tagOf, type SaleLayout } from './layout';

/** @returns the value of each [shard, hash, field] asked (null: none), one HMGET per shard and hash */
export async function hmgetByShard(redis: FlashRedis, layout: SaleLayout, asked: readonly [number, 'reservations' | 'buyers', string][]): Promise<(string | null)[]> {
  const out: (string | null)[] = new Array(asked.length).fill(null);
  const groups = new Map<string, number[]>();
  for (const [i, [k, hash]] of asked.entries()) groups.set(`${k}:${hash}`, [...(groups.get(`${k}:${hash}`) ?? []), i]);
  await Promise.all(
    [...groups].map(async ([group, at]) => {
      const [k, hash] = group.split(':') as [string, 'reservations' | 'buyers'];
      const values = await idempotent(() => redis.hmget(shardKeys(tagOf(layout, Number(k)))[hash], ...at.map((i) => asked[i][2])));
      at.forEach((i, j) => (out[i] = values[j]));
    }),
  );
  return out;
}

/** @returns the loaded mark of each held shard that is loaded and not being loaded or rebuilt */
export async function loadedEpochs(redis: FlashRedis, layout: SaleLayout, held: readonly number[]): Promise<Map<number, string>> {
  const read = await Promise.all(
    held.map(async (k) => {
      const keys = shardKeys(tagOf(layout, k));
      const [[, loaded], [, rebuilding]] = (await idempotent(() => redis.multi().get(keys.loaded).exists(keys.rebuilding).exec())) as [[null, string | null], [null, number]];
      return loaded && !rebuilding ? ([[k, loaded]] as [number, string][]) : [];
    }),
  );
  return new Map(read.flat());
}

/**
 * Reads one shard for a full pass, in the order drift.ts relies on: its loaded mark, lock, mark and free units at
 * once, then its buyers' entries, claims and reservations. @returns undefined for a shard not loaded, or being
 * loaded or rebuilt
 */
export async function readShard(redis: FlashRedis, layout: SaleLayout, k: number, items: readonly ItemUnits[]): Promise<ShardView | undefined> {
  const keys = shardKeys(tagOf(layout, k));
  const here = items.filter((i) => itemShardCount(layout, i.itemId) > k);
  const replies = (await idempotent(() => {
    const tx = redis.multi().get(keys.loaded).exists(keys.rebuilding).get(keys.closed);
    for (const item of here) tx.lrange(keys.stock(item.itemId), 0, -1);
    return tx.exec();
  })) as [Error | null, unknown][];
  const [[, loaded], [, rebuilding], [, closed], ...lists] = replies;
  if (!loaded || rebuilding) return undefined;
  const free = new Map(here.map((item, i) => [item.itemId, (lists[i][1] as string[]).map(Number)]));
  const buyers = await scan(redis, keys.buyers);
  const claimed = new Set((await idempotent(() => redis.zrange(keys.claims, 0, -1))).map((m) => parseClaimMember(m).orderId));
  const reservations = new Map([...(await scan(redis, keys.reservations))].map(([orderId, value]) => [orderId, { value, order: parseReservation(layout.saleId, k, orderId, value) }]));
  return { k, epoch: loaded as string, free, buyers, claimed, reservations, mark: parseMark(closed as string | null) };
}

/** @returns a hash's fields and values, read with HSCAN in pages (no command holds the node for the whole hash) */
async function scan(redis: FlashRedis, key: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const page of redis.hscanStream(key, { count: 1000 }) as AsyncIterable<string[]>) {
    for (let i = 0; i < page.length; i += 2) out.set(page[i], page[i + 1]);
  }
  return out;
}
