/**
 * A sale's closed mark on each of its stock shards (layout.ts `closed`), which reserve.lua reads before it takes a
 * unit: set while the sale is paused or ended, absent while it is open (src/sale/controls.ts writes it).
 */
import { idempotent, type FlashRedis, type SaleClosed } from './client';
import { shardKeys, type LayoutSource } from './layout';

/**
 * Sets (or, for an open sale, deletes) the closed mark on every stock shard of the sale, all of them before it
 * returns: a reservation that runs after that sees it (one script per shard, atomic there). Idempotent.
 * @param closed PAUSED or ENDED, or undefined to open
 * @throws ioredis errors when a shard's node stays unreachable (some shards may hold the new mark: run it again)
 */
export async function markSale(redis: FlashRedis, layouts: LayoutSource, saleId: number, closed: SaleClosed | undefined): Promise<void> {
  const layout = await layouts.get(saleId);
  await Promise.all(
    layout.tags.map((tag) => {
      const key = shardKeys(tag).closed;
      return idempotent<unknown>(() => (closed ? redis.set(key, closed) : redis.del(key)));
    }),
  );
}

/**
 * @returns the closed mark of each stock shard of the sale, in shard order (undefined: open there); one read per
 *   shard, for the console and the public view
 */
export async function closedMarks(redis: FlashRedis, layouts: LayoutSource, saleId: number): Promise<(SaleClosed | undefined)[]> {
  const layout = await layouts.get(saleId);
  const marks = await Promise.all(layout.tags.map((tag) => idempotent(() => redis.get(shardKeys(tag).closed))));
  return marks.map((m) => (m === 'PAUSED' || m === 'ENDED' ? m : undefined));
}
