/**
 * A sale's start queue: the Redis Stream `{sale:<id>}:accepted` that reserve.lua appends every accepted order
 * to, in the same atomic step as its reservation (I4). The starters (src/starter/starter.ts) read it through one
 * consumer group; an entry is acknowledged and deleted once its order's workflow exists, so the stream holds
 * only what is still to be started. Every command names one sale's key, so it runs unchanged on Redis Cluster.
 */
import type Redis from 'ioredis';
import type { OrderInput } from '../order/types';
import { saleKeys } from './store';

/** The consumer group every starter reads through. */
export const STARTER_GROUP = 'starters';

/** One entry of a start queue: the stream entry id (`<ms>-<seq>`, Redis' clock) and the order it accepted. */
export interface QueuedOrder {
  entryId: string;
  order: OrderInput;
}

/** Thrown for an entry without the fields reserve.lua writes; it stays pending (nothing can start it). */
export class InvalidEntry extends Error {}

/** A stream entry as Redis returns it: id and flat field/value list. */
export type RawEntry = [id: string, fields: string[] | null];

const FIELDS = ['orderId', 'itemId', 'userId', 'reservedAtMs', 'priceMinor', 'paymentWindowMs'] as const;

/** @throws InvalidEntry when a field reserve.lua writes is missing or a number is not one */
export function parseEntry(saleId: number, [entryId, fields]: RawEntry): QueuedOrder {
  const value = new Map<string, string>();
  for (let i = 0; fields && i + 1 < fields.length; i += 2) value.set(fields[i], fields[i + 1]);
  const missing = FIELDS.filter((f) => !value.has(f));
  const numbers = { itemId: 0, reservedAtMs: 0, priceMinor: 0, paymentWindowMs: 0 };
  for (const key of Object.keys(numbers) as (keyof typeof numbers)[]) numbers[key] = Number(value.get(key));
  if (missing.length || Object.values(numbers).some((n) => !Number.isSafeInteger(n))) {
    throw new InvalidEntry(`start queue entry ${entryId} of sale ${saleId} is not an order (${missing.length ? `missing ${missing.join(', ')}` : 'bad number'})`);
  }
  return { entryId, order: { orderId: value.get('orderId') as string, saleId, userId: value.get('userId') as string, ...numbers } };
}

const isNoGroup = (err: unknown) => err instanceof Error && err.message.startsWith('NOGROUP');

/** The start queues of all sales, over one Redis connection. Methods throw ioredis errors when Redis is unreachable. */
export class StartQueue {
  constructor(private readonly redis: Redis) {}

  /**
   * Creates the sale's consumer group at the stream's beginning (with the stream, if there is none yet), so
   * every entry ever appended is delivered; a group that exists already is left as it is.
   */
  async ensureGroup(saleId: number): Promise<void> {
    try {
      await this.redis.xgroup('CREATE', saleKeys(saleId).startQueue, STARTER_GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!(err instanceof Error && err.message.startsWith('BUSYGROUP'))) throw err;
    }
  }

  /** Runs a group command, creating the group first when Redis says there is none (a new sale, or after data loss). */
  private async inGroup<T>(saleId: number, command: () => Promise<T>): Promise<T> {
    try {
      return await command();
    } catch (err) {
      if (!isNoGroup(err)) throw err;
      await this.ensureGroup(saleId);
      return command();
    }
  }

  /**
   * Delivers up to `count` entries no starter has seen yet to `consumer` (XREADGROUP `>`, not blocking); they
   * stay pending under its name until acknowledged.
   * @returns the raw entries; parse each with parseEntry
   */
  async read(saleId: number, consumer: string, count: number): Promise<RawEntry[]> {
    const key = saleKeys(saleId).startQueue;
    const reply = (await this.inGroup(saleId, () => this.redis.xreadgroup('GROUP', STARTER_GROUP, consumer, 'COUNT', count, 'STREAMS', key, '>'))) as
      | [string, RawEntry[]][]
      | null;
    return reply?.[0]?.[1] ?? [];
  }

  /**
   * Takes over, for `consumer`, up to `count` entries that have been pending with any starter for at least
   * minIdleMs (XAUTOCLAIM): a starter that died, or one that could not start them.
   * @param cursor where the previous sweep of the pending entries stopped ('0-0' to begin)
   * @returns the claimed raw entries and where to go on ('0-0' once the sweep went round)
   */
  async claim(saleId: number, consumer: string, minIdleMs: number, count: number, cursor: string): Promise<{ entries: RawEntry[]; cursor: string }> {
    const key = saleKeys(saleId).startQueue;
    const [next, entries] = (await this.inGroup(saleId, () => this.redis.xautoclaim(key, STARTER_GROUP, consumer, minIdleMs, cursor, 'COUNT', count))) as [
      string,
      RawEntry[],
    ];
    // Redis 6.2 returned deleted entries with nil fields; they have no order to start.
    return { entries: entries.filter(([, fields]) => fields !== null), cursor: next };
  }

  /** Acknowledges entries whose workflow exists and deletes them from the stream, in one MULTI. */
  async done(saleId: number, entryIds: readonly string[]): Promise<void> {
    const key = saleKeys(saleId).startQueue;
    const replies = await this.redis.multi().xack(key, STARTER_GROUP, ...entryIds).xdel(key, ...entryIds).exec();
    const failed = replies?.find(([err]) => err);
    if (failed) throw failed[0];
  }

  /**
   * @returns entries still to be started (pending with a starter or not yet read) and the age of the oldest
   *   one in ms, from its entry id's Redis time (null when the queue is empty)
   */
  async depth(saleId: number, nowMs: number): Promise<{ waiting: number; oldestAgeMs: number | null }> {
    const key = saleKeys(saleId).startQueue;
    const [[, waiting], [, first]] = (await this.redis.multi().xlen(key).xrange(key, '-', '+', 'COUNT', 1).exec()) as [
      [Error | null, number],
      [Error | null, RawEntry[]],
    ];
    const oldest = first[0] ? Number(first[0][0].split('-')[0]) : undefined;
    return { waiting, oldestAgeMs: oldest === undefined ? null : Math.max(0, nowMs - oldest) };
  }

  /**
   * Removes `consumer` from the sale's group if it holds no pending entry (a starter stopping cleanly; one that
   * still holds entries stays, so that others can claim them).
   */
  async leave(saleId: number, consumer: string): Promise<void> {
    const key = saleKeys(saleId).startQueue;
    const consumers = (await this.redis.xinfo('CONSUMERS', key, STARTER_GROUP).catch((err: unknown) => {
      if (isNoGroup(err) || (err instanceof Error && /no such key/i.test(err.message))) return [];
      throw err;
    })) as (string | number)[][];
    const mine = consumers.find((fields) => fields[fields.indexOf('name') + 1] === consumer);
    if (mine && mine[mine.indexOf('pending') + 1] === 0) await this.redis.xgroup('DELCONSUMER', key, STARTER_GROUP, consumer);
  }
}
