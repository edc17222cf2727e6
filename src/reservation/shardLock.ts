/**
 * A stock shard's lock, held by one load or rebuild at a time (src/reservation/loading.ts): a key with a token
 * and an expiry, so that a crashed holder's lock lapses.
 */
import { idempotent, type FlashRedis } from './client';
import { shardKeys, type SaleLayout } from './layout';

/** How long a load or rebuild may hold a shard's lock (ms); it expires after a crash. */
const LOCK_MS = 120_000;
/** A lock's token says who holds it: a rebuild waits for a load, and refuses to run beside another rebuild. */
export const LOAD = 'load:';
export const REBUILD = 'rebuild:';
/** How often a load or a rebuild looks again at a shard another holds (ms). */
export const LOCK_POLL_MS = 100;
/** Deletes the lock only while it holds the caller's token. */
const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/** The locks of one sale's shards. Methods throw ioredis errors when Redis is unreachable. */
export class ShardLocks {
  constructor(
    private readonly redis: FlashRedis,
    private readonly layout: SaleLayout,
  ) {}

  /** @returns whether shard k's lock was free and is now the token's */
  async lock(k: number, token: string): Promise<boolean> {
    return (await this.redis.set(shardKeys(this.layout.tags[k]).rebuilding, token, 'PX', LOCK_MS, 'NX')) === 'OK';
  }

  async unlock(k: number, token: string): Promise<void> {
    await this.redis.eval(UNLOCK, 1, shardKeys(this.layout.tags[k]).rebuilding, token).catch(() => undefined);
  }

  /** @returns whether shard k is locked for this load (false: it is loaded, by another load or a rebuild meanwhile) */
  async lockWhenFree(k: number, token: string): Promise<boolean> {
    const loaded = async () => (await idempotent(() => this.redis.exists(shardKeys(this.layout.tags[k]).loaded))) === 1;
    for (;;) {
      if (await loaded()) return false;
      if (await this.lock(k, token)) {
        if (!(await loaded())) return true;
        await this.unlock(k, token);
        return false;
      }
      await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
    }
  }

  /** @returns the token holding shard k's lock, if any */
  holder(k: number): Promise<string | null> {
    return this.redis.get(shardKeys(this.layout.tags[k]).rebuilding);
  }
}
