/**
 * Claims left behind by a purchase that died between claiming its buyer on the home shard and taking a unit
 * elsewhere: settled when the order holds a reservation, undone otherwise. Ages are Redis' own clock; a take
 * refuses a claim older than its lease (half the repair age), so no take lands after its claim is undone while two
 * masters' clocks differ by less than the lease.
 */
import type { OrderInput } from '../order/types';
import { idempotent, type FlashRedis } from './client';
import { claimMember, parseClaimMember } from './formats';
import { itemShardCount, shardKeys } from './layout';
import type { LayoutSource } from './layout';

/** Claims read per page of a shard's stale claims. */
const CLAIMS_PER_PASS = 100;

/** @returns how old a claim may be when reserve.lua (`take`) takes its unit (ms): half the age at which it is repaired */
export function claimLeaseMs(claimIdleMs: number): number {
  return Math.floor(claimIdleMs / 2);
}

/**
 * Settles or undoes the sale's claims older than olderThanMs, by Redis' clock, on every shard.
 * @returns how many claims were settled and undone
 * @throws ioredis errors when Redis stays unreachable, or SHARD_NOT_LOADED on a shard that lost its data; what is
 *   left is repaired by the next pass
 */
export async function repairClaims(redis: FlashRedis, layouts: LayoutSource, saleId: number, olderThanMs: number): Promise<{ settled: number; undone: number }> {
  const layout = await layouts.get(saleId);
  const result = { settled: 0, undone: 0 };
  for (const tag of layout.tags) {
    const keys = shardKeys(tag);
    // Page by page until a short one: a crash in a stampede may leave thousands of claims.
    for (let page = CLAIMS_PER_PASS; page === CLAIMS_PER_PASS; ) {
      const stale = await idempotent(() => redis.staleClaims(keys.claims, String(olderThanMs), String(CLAIMS_PER_PASS)));
      page = stale.length;
      for (const member of stale) {
        const claim: Pick<OrderInput, 'orderId' | 'itemId' | 'userId'> = parseClaimMember(member);
        const shards = layout.tags.slice(0, itemShardCount(layout, claim.itemId));
        const held = await Promise.all(shards.map((t) => idempotent(() => redis.hexists(shardKeys(t).reservations, claim.orderId))));
        if (held.some(Boolean)) {
          await idempotent(() => redis.zrem(keys.claims, member));
          result.settled += 1;
        } else {
          await idempotent(() => redis.unclaim(keys.buyers, keys.claims, keys.loaded, claim.userId, claim.orderId, claimMember(claim)));
          result.undone += 1;
        }
      }
    }
  }
  return result;
}
