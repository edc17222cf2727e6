/**
 * Where a new sale's stock shards go on a Redis Cluster (one master each), and whether they still do after a
 * resharding moved slots. On a single Redis every shard is on the one node.
 */
import { Cluster } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import type { FlashRedis } from './client';
import { placeTags, type LayoutSource } from './layout';

/** Chooses the hash tags of a new sale's shards: (saleId, shards) → one tag per shard. */
export type ShardPlacer = (saleId: number, shards: number) => string[];

/**
 * @returns a placer that chooses the tags from this client's view of the cluster (layout.ts placeTags)
 * @throws LayoutError (from the placer) when the cluster has fewer masters than shards
 */
export function shardPlacer(redis: FlashRedis): ShardPlacer {
  return (saleId, shards) => {
    if (!(redis instanceof Cluster)) return placeTags(saleId, shards);
    const slots = redis.slots;
    return placeTags(saleId, shards, (tag) => slots[calculateSlot(tag)]?.[0], new Set(slots.map((nodes) => nodes[0])).size);
  };
}

/**
 * @returns the shards of the sale that share a master with another (after a resharding moved slots), as
 *   `shard k: host:port`; empty on a single node and while the placement holds
 * @throws LayoutError when the sale does not exist
 */
export async function sharedMasters(redis: FlashRedis, layouts: LayoutSource, saleId: number): Promise<string[]> {
  if (!(redis instanceof Cluster)) return [];
  const layout = await layouts.get(saleId);
  await new Promise<void>((resolve, reject) => redis.refreshSlotsCache((err) => (err ? reject(err) : resolve())));
  const owners = layout.tags.map((tag) => redis.slots[calculateSlot(tag)]?.[0]);
  return owners.flatMap((owner, k) => (owners.indexOf(owner) !== k || owners.lastIndexOf(owner) !== k ? [`shard ${k}: ${owner}`] : []));
}
