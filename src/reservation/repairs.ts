/**
 * The reconciler's repairs applied (src/reservation/reconciler.ts), each one compare-and-set on its shard
 * (lua/repair.lua; a mark through lua/mark.lua), after a fresh look at PostgreSQL for those that depend on it.
 */
import type { Pool } from 'pg';
import { heldUnits, rowStates } from '../order/truth';
import { idempotent, type FlashRedis } from './client';
import { markShard } from './closing';
import type { Repair } from './drift';
import { shardKeys, tagOf, type SaleLayout } from './layout';

const LIVE = new Set(['PENDING', 'PAID']);

/**
 * Applies the repairs, each one compare-and-set, after a fresh look at PostgreSQL for those that depend on it
 * (a restore needs the order still live, a unit freed or given back needs no live order holding it).
 * @returns the repairs that wrote
 */
export async function applyRepairs(redis: FlashRedis, pool: Pool, layout: SaleLayout, { repairs, epochs }: { repairs: Repair[]; epochs: ReadonlyMap<number, string> }): Promise<Repair[]> {
  if (!repairs.length) return [];
  const restoring = repairs.flatMap((r) => (r.kind === 'restore' ? [r.order.orderId] : []));
  const stillLive = await rowStates(pool, restoring);
  const units = repairs.flatMap((r) => ((r.kind === 'free' || (r.kind === 'release' && r.unitBack)) ? [{ itemId: r.itemId, unit: r.unit }] : []));
  const held = await heldUnits(pool, units);
  const applied: Repair[] = [];
  for (const repair of repairs) {
    if (repair.kind === 'restore' && !LIVE.has(stillLive.get(repair.order.orderId)?.status ?? '')) continue;
    if (repair.kind === 'free' && held.has(`${repair.itemId}:${repair.unit}`)) continue;
    const epoch = epochs.get(repair.k);
    if (epoch === undefined) continue;
    const wrote = repair.kind === 'mark' ? await remark(redis, layout, repair) : (await run(redis, layout, repair, epoch, held)) === 1;
    if (!wrote) continue;
    applied.push(repair);
    // The buyer's entry of a released order lives on their home shard, which may be another.
    const homeEpoch = repair.kind === 'release' && repair.home !== repair.k ? epochs.get(repair.home) : undefined;
    if (repair.kind === 'release' && homeEpoch !== undefined) {
      await run(redis, layout, { k: repair.home, kind: 'clearBuyer', userId: repair.userId, orderId: repair.orderId, seen: '' }, homeEpoch, held);
    }
  }
  return applied;
}

async function remark(redis: FlashRedis, layout: SaleLayout, repair: Extract<Repair, { kind: 'mark' }>): Promise<boolean> {
  const { now } = await markShard(redis, tagOf(layout, repair.k), repair.mark);
  return now?.version === repair.mark.version;
}

/** Runs one repair script on its shard (lua/repair.lua). @returns its answer */
function run(redis: FlashRedis, layout: SaleLayout, repair: Exclude<Repair, { kind: 'mark' }>, epoch: string, held: ReadonlySet<string>): Promise<0 | 1 | 'SKIPPED'> {
  const keys = shardKeys(tagOf(layout, repair.k));
  const itemId = 'itemId' in repair ? repair.itemId : repair.kind === 'restore' ? repair.order.itemId : 0;
  const args = ((): string[] => {
    switch (repair.kind) {
      case 'release':
        return ['RELEASE', repair.orderId, repair.value, repair.unitBack && !held.has(`${repair.itemId}:${repair.unit}`) ? '1' : '0'];
      case 'restore':
        return ['RESTORE', repair.order.orderId, repair.value, String(repair.order.unit)];
      case 'setBuyer':
        return ['SET_BUYER', repair.userId, repair.orderId, repair.expected];
      case 'clearBuyer':
        return ['CLEAR_BUYER', repair.userId, repair.orderId];
      case 'take':
        return ['TAKE', String(repair.unit), repair.holder, repair.holderValue];
      case 'dedupe':
        return ['DEDUPE', String(repair.unit)];
      case 'free':
        return ['FREE', String(repair.unit), String(repair.itemId)];
    }
  })();
  const [op, ...rest] = args;
  return idempotent(() => redis.repair(keys.loaded, keys.rebuilding, keys.reservations, keys.buyers, keys.released, keys.stock(itemId), keys.returns(itemId), op, epoch, ...rest));
}
