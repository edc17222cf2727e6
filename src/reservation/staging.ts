/**
 * A shard's stock, reservations and buyers' entries written under keys of a load's or rebuild's own, then put in
 * place in one script (PUT_IN_PLACE) while its lock is still held and the shard still unloaded.
 */
import type { OrderInput } from '../order/types';
import type { FlashRedis } from './client';
import { markShard, type SaleMark } from './closing';
import { reservationValue } from './formats';
import { itemShardCount, shardKeys, shardUnits, type SaleLayout } from './layout';

/** An item's quantity, to split over its shards. */
export interface ItemQuantity {
  itemId: number;
  quantity: number;
}

/**
 * Puts one shard's staged keys in place, in one step, while the caller holds its lock and it has no loaded mark;
 * else drops them and returns 0. Staged keys are filled beforehand (stage), so no script of a load pushes a
 * whole quantity while every other command of the node waits; this one renames.
 * KEYS: the loaded mark, the lock, the claims, the closed mark, then pairs (staged, live) for the buyers' entries,
 * the reservations and each item's stock list, then each item's returns count. ARGV: the lock's token, the epoch,
 * now (ms), the number of items. A shard is never loaded without the sale's state: the closed mark is put first
 * (lua/mark.lua, so a newer control's stays), and this step refuses without it. A pair without a staged key empties
 * the live one (an item with no free unit, a shard with no order). A renamed key keeps its staging expiry, which
 * PERSIST lifts. The returns counts move on (a buyer who found the shard empty before must look again).
 */
const PUT_IN_PLACE = `local loaded, lock, claims, closed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local items = tonumber(ARGV[4])
local pairsEnd = 4 + 2 * (2 + items)
if redis.call('GET', lock) ~= ARGV[1] or redis.call('EXISTS', loaded) == 1 or redis.call('EXISTS', closed) == 0 then
  for i = 5, pairsEnd, 2 do redis.call('DEL', KEYS[i]) end
  return 0
end
redis.call('DEL', claims)
for i = 5, pairsEnd, 2 do
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
export const PUSH_BATCH = 10_000;
/** How long a staged key outlives a load that crashed before putting it in place (ms). */
const STAGED_TTL_MS = 600_000;

/** Stages and puts in place over one client. Methods throw ioredis errors when Redis is unreachable. */
export class Staging {
  constructor(private readonly redis: FlashRedis) {}

  /**
   * Stages shard k's free units per item, and (a rebuild) its reservations and buyers' entries, in keys of this
   * call's own, then puts them in place (PUT_IN_PLACE).
   * @param held the live orders whose unit this shard gave, with its new epoch (their reservations)
   * @param homed the orders whose buyer is homed on this shard (their buyers' entries)
   * @param mark the sale's state as PostgreSQL holds it (src/sale/controls.ts), put first unless a newer one is there
   * @param onStagingFailed run when staging fails, before the error is thrown (nothing went in place)
   * @returns whether they went in place (false: the lock was lost, or the shard loaded meanwhile)
   */
  async putInPlace(
    layout: SaleLayout,
    k: number,
    token: string,
    epoch: number,
    here: readonly ItemQuantity[],
    liveOrders: readonly OrderInput[],
    held: readonly OrderInput[],
    homed: readonly OrderInput[],
    mark: SaleMark,
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
    await markShard(this.redis, layout.tags[k], mark);
    const keysOf = [keys.loaded, keys.rebuilding, keys.claims, keys.closed, ...pairs.flat(), ...here.map((item) => keys.returns(item.itemId))];
    const put = await this.redis.eval(PUT_IN_PLACE, keysOf.length, ...keysOf, token, String(epoch), String(Date.now()), String(here.length));
    return put === 1;
  }

  private async stageHash(key: string, fields: readonly [string, string][]): Promise<void> {
    for (let i = 0; i < fields.length; i += PUSH_BATCH) {
      await exec(this.redis.multi().hset(key, Object.fromEntries(fields.slice(i, i + PUSH_BATCH))).pexpire(key, STAGED_TTL_MS));
    }
  }
}

/** @returns an item's free units on shard k: its run of units less those the live orders from that shard hold */
function free(layout: SaleLayout, item: ItemQuantity, k: number, liveOrders: readonly OrderInput[]): number[] {
  const held = new Set(liveOrders.filter((o) => o.itemId === item.itemId && (o.stockShard ?? 0) === k).map((o) => o.unit));
  return shardUnits(item.quantity, itemShardCount(layout, item.itemId), k).filter((unit) => !held.has(unit));
}

/** Runs a MULTI or pipeline; @throws the first command's error */
export async function exec(tx: ReturnType<FlashRedis['multi']> | ReturnType<FlashRedis['pipeline']>): Promise<void> {
  const failed = ((await tx.exec()) ?? []).find(([err]) => err);
  if (failed) throw failed[0];
}
