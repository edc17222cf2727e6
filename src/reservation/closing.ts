/**
 * A sale's closed mark on each of its stock shards (layout.ts `closed`), which reserve.lua reads before it takes a
 * unit: PAUSED or ENDED, or OPEN (src/sale/controls.ts writes it; a load too).
 */
import { idempotent, type SaleClosed } from './client';
import { shardKeys } from './layout';
import type { ReservationStore } from './store';

/** Sets the mark, and names the node that wrote it ('' on a single Redis), for the replication barrier. */
const MARK = `redis.call('SET', KEYS[1], ARGV[1])
local id = redis.pcall('CLUSTER', 'MYID')
return type(id) == 'string' and id or ''`;

/** Thrown by markSale when fewer replicas than asked (REDIS_WAIT_REPLICAS) hold a mark in time: a failover could lose it. */
export class MarkNotReplicated extends Error {}

/**
 * Sets the closed mark on every stock shard of the sale (OPEN for an open one), all of them before it
 * returns: a reservation that runs after that sees it (one script per shard, atomic there). With replicas asked
 * (REDIS_WAIT_REPLICAS), it returns only once that many replicas of each node hold it, as a 202 waits for its
 * reservation's, so that a failover keeps it. Idempotent.
 * @param closed PAUSED or ENDED, or undefined to open
 * @throws MarkNotReplicated; ioredis errors when a shard's node stays unreachable (some shards may hold the new
 *   mark: run it again)
 */
export async function markSale(store: Pick<ReservationStore, 'redis' | 'layouts' | 'options'>, saleId: number, closed: SaleClosed | undefined): Promise<void> {
  const layout = await store.layouts.get(saleId);
  const nodes = await Promise.all(layout.tags.map((tag) => idempotent(() => store.redis.eval(MARK, 1, shardKeys(tag).closed, closed ?? 'OPEN') as Promise<string>)));
  const { barrier, replicas = 0 } = store.options;
  if (!barrier || replicas === 0) return;
  const held = Math.min(...(await Promise.all([...new Set(nodes)].map((node) => barrier.held(node)))));
  if (held < replicas) throw new MarkNotReplicated(`sale ${saleId}: the closed mark is on ${held} replica(s) of ${replicas} asked; send the control again`);
}

/**
 * @returns the closed mark of each stock shard of the sale, in shard order (undefined: open there); one read per
 *   shard, for the console and the public view
 */
export async function closedMarks(store: Pick<ReservationStore, 'redis' | 'layouts'>, saleId: number): Promise<(SaleClosed | undefined)[]> {
  const layout = await store.layouts.get(saleId);
  const marks = await Promise.all(layout.tags.map((tag) => idempotent(() => store.redis.get(shardKeys(tag).closed))));
  return marks.map((m) => (m === 'PAUSED' || m === 'ENDED' ? m : undefined));
}
