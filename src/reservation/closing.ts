/**
 * A sale's closed mark on each of its stock shards (layout.ts `closed`), which reserve.lua reads before it takes a
 * unit: PAUSED or ENDED, or OPEN, with the number of the control that set it (src/sale/controls.ts writes it; a
 * load, a rebuild and the reconciler put PostgreSQL's back). lua/mark.lua keeps a newer mark in place, so marks
 * landing out of order leave the latest control's (docs/design.md, "Sale controls").
 */
import { idempotent, type FlashRedis, type SaleClosed } from './client';
import { shardKeys } from './layout';
import type { ReservationStore } from './store';

/** A sale's state as a mark carries it: closed (undefined: open) and the number of the control that set it (0: none). */
export interface SaleMark {
  closed: SaleClosed | undefined;
  version: number;
}

/** @returns the mark's value in Redis: `OPEN:3`, `PAUSED:4`, `ENDED:5` */
export const markValue = ({ closed, version }: SaleMark): string => `${closed ?? 'OPEN'}:${version}`;

/** @returns the mark a value holds (one without a number, from before numbers, is version 0), or undefined for none */
export function parseMark(value: string | null | undefined): SaleMark | undefined {
  if (!value) return undefined;
  const [state, version] = value.split(':');
  return { closed: state === 'PAUSED' || state === 'ENDED' ? state : undefined, version: Number(version ?? 0) || 0 };
}

/** Thrown by markSale when fewer replicas than asked (REDIS_WAIT_REPLICAS) hold a mark in time: a failover could lose it. */
export class MarkNotReplicated extends Error {}

/**
 * Sets the mark on one shard (lua/mark.lua) unless a newer one is there.
 * @returns the node that holds the write ('' on a single Redis) and the mark in place now
 */
export async function markShard(redis: FlashRedis, tag: string, mark: SaleMark): Promise<{ node: string; now: SaleMark | undefined }> {
  const [node, now] = await idempotent(() => redis.mark(shardKeys(tag).closed, markValue(mark)));
  return { node, now: parseMark(now) };
}

/**
 * Sets the mark on every stock shard of the sale, all of them before it returns, each kept where a newer one is
 * in place: a reservation that runs after that sees it or a later control's (one script per shard, atomic
 * there). With replicas asked (REDIS_WAIT_REPLICAS), it returns only once that many replicas of each node hold
 * it, as a 202 waits for its reservation's, so that a failover keeps it. Idempotent.
 * @throws MarkNotReplicated; ioredis errors when a shard's node stays unreachable (some shards may hold the new
 *   mark: run it again)
 */
export async function markSale(store: Pick<ReservationStore, 'redis' | 'layouts' | 'options'>, saleId: number, mark: SaleMark): Promise<void> {
  const layout = await store.layouts.get(saleId);
  const nodes = await Promise.all(layout.tags.map(async (tag) => (await markShard(store.redis, tag, mark)).node));
  const { barrier, replicas = 0 } = store.options;
  if (!barrier || replicas === 0) return;
  const held = Math.min(...(await Promise.all([...new Set(nodes)].map((node) => barrier.held(node)))));
  if (held < replicas) throw new MarkNotReplicated(`sale ${saleId}: the closed mark is on ${held} replica(s) of ${replicas} asked; send the control again`);
}

/**
 * @returns the closed state each stock shard's mark says, in shard order (undefined: open there); one read per
 *   shard, for the console and the public view
 */
export async function closedMarks(store: Pick<ReservationStore, 'redis' | 'layouts'>, saleId: number): Promise<(SaleClosed | undefined)[]> {
  const layout = await store.layouts.get(saleId);
  const marks = await Promise.all(layout.tags.map((tag) => idempotent(() => store.redis.get(shardKeys(tag).closed))));
  return marks.map((m) => parseMark(m)?.closed);
}
