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
 * (a restore or a buyer's entry needs the order still live, a unit freed or given back needs no live order
 * holding it). An order can end between that look and the write, and its own release run before the write: a
 * buyer's entry set is looked at again after the write and cleared if its order ended meanwhile (a restore
 * needs no second look: RESTORE refuses an order its shard released).
 * @returns the repairs that wrote
 */
export async function applyRepairs(redis: FlashRedis, pool: Pool, layout: SaleLayout, { repairs, epochs }: { repairs: Repair[]; epochs: ReadonlyMap<number, string> }): Promise<Repair[]> {
  if (!repairs.length) return [];
  const stillLive = await rowStates(pool, repairs.flatMap(liveOrderOf));
  const units = repairs.flatMap((r) => ((r.kind === 'free' || (r.kind === 'release' && r.unitBack)) ? [{ itemId: r.itemId, unit: r.unit }] : []));
  const held = await heldUnits(pool, units);
  const applied: Repair[] = [];
  for (const repair of repairs) {
    const needsLive = liveOrderOf(repair);
    if (needsLive.length && !LIVE.has(stillLive.get(needsLive[0])?.status ?? '')) continue;
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
  const entries = applied.filter((r): r is Extract<Repair, { kind: 'setBuyer' }> => r.kind === 'setBuyer');
  const after = await rowStates(pool, entries.map((r) => r.orderId));
  for (const entry of entries) {
    const epoch = epochs.get(entry.k);
    if (LIVE.has(after.get(entry.orderId)?.status ?? '') || epoch === undefined) continue;
    await run(redis, layout, { k: entry.k, kind: 'clearBuyer', userId: entry.userId, orderId: entry.orderId, seen: '' }, epoch, held);
  }
  return applied;
}

/** @returns the order a repair needs still live in PostgreSQL when it writes (none or one) */
function liveOrderOf(repair: Repair): string[] {
  if (repair.kind === 'restore') return [repair.order.orderId];
  return repair.kind === 'setBuyer' ? [repair.orderId] : [];
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
