/**
 * A sale's start queues: a Redis Stream per stock shard that reserve.lua appends each accepted order to with its
 * reservation (I4). Starters read them through one consumer group; an entry is deleted once its workflow exists.
 * An entry id is the stream's id on shard 0 and `<k>/<id>` on shard k (ids of two nodes may be equal).
 */
import type { OrderInput } from '../order/types';
import type { FlashRedis } from './client';
import { entryTraceParent, parseEntryFields } from './formats';
import { shardKeys } from './layout';
import type { LayoutSource } from './layout';

/** The consumer group every starter reads through. */
export const STARTER_GROUP = 'starters';

/**
 * One entry of a start queue: the entry id (`<ms>-<seq>`, Redis' clock, after `<k>/` on shard k), the order it
 * accepted, and with tracing on the traceparent of the reservation's span.
 */
export interface QueuedOrder {
  entryId: string;
  order: OrderInput;
  traceParent?: string;
}

/** A stream entry as Redis returns it (its id after `<k>/` on shard k): id and flat field/value list. */
export type RawEntry = [id: string, fields: string[] | null];

/** @returns the shard and the stream's own id of an entry id */
function splitId(entryId: string): { shard: number; id: string } {
  const slash = entryId.indexOf('/');
  return slash < 0 ? { shard: 0, id: entryId } : { shard: Number(entryId.slice(0, slash)), id: entryId.slice(slash + 1) };
}

const joinId = (shard: number, id: string) => (shard === 0 ? id : `${shard}/${id}`);
const tagged = (shard: number, entries: RawEntry[]): RawEntry[] => entries.map(([id, fields]) => [joinId(shard, id), fields]);

/** @throws InvalidEntry (formats.ts) when a field of the entry is missing or a number is not one */
export function parseEntry(saleId: number, [entryId, fields]: RawEntry): QueuedOrder {
  const traceParent = entryTraceParent(fields);
  return { entryId, order: { ...parseEntryFields(saleId, entryId, fields), stockShard: splitId(entryId).shard }, ...(traceParent && { traceParent }) };
}

const isNoGroup = (err: unknown) => err instanceof Error && err.message.startsWith('NOGROUP');

/** The start queues of all sales, over one Redis connection. Methods throw ioredis errors when Redis is unreachable. */
export class StartQueue {
  /** Per sale, the shard whose stream the next read starts with, so that no shard waits behind another. */
  private readonly nextShard = new Map<number, number>();
  /**
   * The client's key prefix (REDIS_KEY_PREFIX), written out for XGROUP and XINFO: ioredis does not find the key
   * of these container commands, so it neither prefixes it nor routes by it (a cluster node redirects: MOVED).
   */
  private readonly prefix: string;

  /**
   * Entries are handed out whatever their replicas hold (REDIS_WAIT_REPLICAS guards a purchase's answer, not the
   * order's life): an order that got its 202, or a 503 after its unit was taken, starts and ends even while its
   * master has no replica.
   */
  constructor(
    private readonly redis: FlashRedis,
    private readonly layouts: LayoutSource,
  ) {
    this.prefix = redis.options.keyPrefix ?? '';
  }

  private async streams(saleId: number): Promise<string[]> {
    return (await this.layouts.get(saleId)).tags.map((tag) => shardKeys(tag).startQueue);
  }

  /**
   * Creates the consumer group of each of the sale's streams at its beginning (with the stream, if there is none
   * yet), so every entry ever appended is delivered; a group that exists already is left as it is.
   */
  async ensureGroup(saleId: number): Promise<void> {
    for (const key of await this.streams(saleId)) await this.ensureGroupOf(key);
  }

  private async ensureGroupOf(key: string): Promise<void> {
    try {
      await this.redis.xgroup('CREATE', this.prefix + key, STARTER_GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith('BUSYGROUP'))) throw err;
    }
  }

  /** Runs a group command, creating the group first when Redis says there is none (a new sale, or after data loss). */
  private async inGroup<T>(key: string, command: () => Promise<T>): Promise<T> {
    try {
      return await command();
    } catch (err) {
      if (!isNoGroup(err)) throw err;
      await this.ensureGroupOf(key);
      return command();
    }
  }

  /**
   * Delivers up to `count` entries no starter has seen yet to `consumer` (XREADGROUP `>`, not blocking), from
   * the sale's shards in turn; they stay pending under its name until acknowledged.
   * @returns the raw entries; parse each with parseEntry
   */
  async read(saleId: number, consumer: string, count: number): Promise<RawEntry[]> {
    const keys = await this.streams(saleId);
    const first = (this.nextShard.get(saleId) ?? 0) % keys.length;
    this.nextShard.set(saleId, first + 1);
    const out: RawEntry[] = [];
    for (let i = 0; i < keys.length && out.length < count; i++) {
      const shard = (first + i) % keys.length;
      const key = keys[shard];
      const reply = (await this.inGroup(key, () => this.redis.xreadgroup('GROUP', STARTER_GROUP, consumer, 'COUNT', count - out.length, 'STREAMS', key, '>'))) as
        | [string, RawEntry[]][]
        | null;
      out.push(...tagged(shard, reply?.[0]?.[1] ?? []));
    }
    return out;
  }

  /**
   * Takes over, for `consumer`, up to `count` entries that have been pending with any starter for at least
   * minIdleMs (XAUTOCLAIM): a starter that died, or one that could not start them. The sweep goes through the
   * shards one after another.
   * @param cursor where the previous sweep of the pending entries stopped ('0-0' to begin)
   * @returns the claimed raw entries and where to go on ('0-0' once the sweep went round every shard)
   */
  async claim(saleId: number, consumer: string, minIdleMs: number, count: number, cursor: string): Promise<{ entries: RawEntry[]; cursor: string }> {
    const keys = await this.streams(saleId);
    const at = splitId(cursor);
    const shard = at.shard < keys.length ? at.shard : 0;
    const key = keys[shard];
    const [next, entries] = (await this.inGroup(key, () => this.redis.xautoclaim(key, STARTER_GROUP, consumer, minIdleMs, at.id, 'COUNT', count))) as [string, RawEntry[]];
    const nextCursor = next !== '0-0' ? joinId(shard, next) : shard + 1 < keys.length ? joinId(shard + 1, '0-0') : '0-0';
    // Redis 6.2 returned deleted entries with nil fields; they have no order to start.
    return { entries: tagged(shard, entries.filter(([, fields]) => fields !== null)), cursor: nextCursor };
  }

  /** Acknowledges entries whose workflow exists and deletes them from their streams, in one MULTI per shard. */
  async done(saleId: number, entryIds: readonly string[]): Promise<void> {
    const keys = await this.streams(saleId);
    const byShard = new Map<number, string[]>();
    for (const entryId of entryIds) {
      const { shard, id } = splitId(entryId);
      byShard.set(shard, [...(byShard.get(shard) ?? []), id]);
    }
    for (const [shard, ids] of byShard) {
      const key = keys[shard];
      const replies = await this.redis.multi().xack(key, STARTER_GROUP, ...ids).xdel(key, ...ids).exec();
      const failed = replies?.find(([err]) => err);
      if (failed) throw failed[0];
    }
  }

  /**
   * Moves an entry no starter can start (InvalidEntry: a field missing, or written by a version of another format)
   * out of the queue: copied to its shard's `<shard tag>:accepted:invalid` stream with its entry id, then
   * acknowledged and deleted, in one MULTI. Left in the queue it would be claimed and refused again at every
   * sweep, for as long as its sale is recent; set aside, it waits for an operator (docs/operations.md).
   */
  async setAside(saleId: number, [entryId, fields]: RawEntry): Promise<void> {
    const keys = await this.streams(saleId);
    const { shard, id } = splitId(entryId);
    const key = keys[shard];
    const replies = await this.redis
      .multi()
      .xadd(`${key}:invalid`, '*', 'entryId', id, ...(fields ?? []))
      .xack(key, STARTER_GROUP, id)
      .xdel(key, id)
      .exec();
    const failed = replies?.find(([err]) => err);
    if (failed) throw failed[0];
  }

  /**
   * @returns entries still to be started over the sale's shards (pending with a starter or not yet read) and
   *   the age of the oldest one in ms, from its entry id's Redis time (null when the queues are empty)
   */
  async depth(saleId: number, nowMs: number): Promise<{ waiting: number; oldestAgeMs: number | null }> {
    let waiting = 0;
    let oldest: number | undefined;
    for (const key of await this.streams(saleId)) {
      const [[, length], [, first]] = (await this.redis.multi().xlen(key).xrange(key, '-', '+', 'COUNT', 1).exec()) as [
        [Error | null, number],
        [Error | null, RawEntry[]],
      ];
      waiting += length;
      const at = first[0] ? Number(first[0][0].split('-')[0]) : undefined;
      if (at !== undefined && (oldest === undefined || at < oldest)) oldest = at;
    }
    return { waiting, oldestAgeMs: oldest === undefined ? null : Math.max(0, nowMs - oldest) };
  }

  /**
   * How many orders the sale's shards have ever accepted into their start queues (lua/accepted.lua): a count that
   * only grows while the stream lives, whichever process appended and whatever was started and deleted since.
   * @returns the sum over the sale's shards
   * @throws Redis errors, and on a Redis older than 7.0 (no `entries-added`)
   */
  async accepted(saleId: number): Promise<number> {
    const counts = await Promise.all((await this.streams(saleId)).map((key) => this.redis.accepted(key)));
    return counts.reduce((sum, n) => sum + n, 0);
  }

  /**
   * Removes `consumer` from the sale's groups where it holds no pending entry (a starter stopping cleanly; one
   * that still holds entries stays, so that others can claim them).
   */
  async leave(saleId: number, consumer: string): Promise<void> {
    for (const key of await this.streams(saleId)) {
      const consumers = (await this.redis.xinfo('CONSUMERS', this.prefix + key, STARTER_GROUP).catch((err: unknown) => {
        if (isNoGroup(err) || (err instanceof Error && /no such key/i.test(err.message))) return [];
        throw err;
      })) as (string | number)[][];
      const mine = consumers.find((fields) => fields[fields.indexOf('name') + 1] === consumer);
      if (mine && mine[mine.indexOf('pending') + 1] === 0) await this.redis.xgroup('DELCONSUMER', this.prefix + key, STARTER_GROUP, consumer);
    }
  }
}
