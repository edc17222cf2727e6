/**
 * Redis gatekeeper: stock, one live order per buyer per sale event, reservations recorded per order, and the
 * sale's start queue (the orders whose workflow is still to be started, read by src/starter/starter.ts).
 * All keys of a sale share the hash tag {sale:<id>} and are passed in KEYS, so reserve.lua and release.lua
 * run unchanged on Redis Cluster (docs/design.md, Keys). ioredis' defineCommand sends EVALSHA and falls back to
 * EVAL when the script cache was flushed (e.g. after a Redis restart).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Redis, { type RedisOptions } from 'ioredis';
import type { Config } from '../config';
import { redisConnection } from '../connections';
import type { OrderInput } from '../order/types';

const LUA_DIR = join(__dirname, '..', '..', 'lua');

type ReserveReply = [1, number] | [2, string] | [3] | [4];

interface ScriptedRedis extends Redis {
  reserve(stockKey: string, buyersKey: string, reservationsKey: string, startQueueKey: string, ...argv: string[]): Promise<ReserveReply>;
  release(stockKey: string, buyersKey: string, reservationsKey: string, ...argv: string[]): Promise<0 | 1>;
}

/** Outcome of a reservation attempt; errors as values for the API's single outcome→HTTP map. */
export type ReserveOutcome =
  | { kind: 'RESERVED'; stockLeft: number }
  | { kind: 'ALREADY_PURCHASED'; orderId: string }
  | { kind: 'SOLD_OUT' }
  | { kind: 'NOT_LOADED' };


/** Redis keys of one sale event; every key carries the sale's hash tag. */
export function saleKeys(saleId: number) {
  const tag = `{sale:${saleId}}`;
  return {
    buyers: `${tag}:buyers`,
    reservations: `${tag}:reservations`,
    /** Stream of accepted orders whose workflow is still to be started (consumer group: the starters). */
    startQueue: `${tag}:accepted`,
    stock: (itemId: number) => `${tag}:stock:${itemId}`,
  };
}

/**
 * Creates an ioredis client for the configured Redis (address, logical database, TLS, ACL user: connections.ts)
 * with our Lua scripts defined.
 * @param options client behaviour (retries, offline queue, pipelining); the connection comes from config
 */
export function createRedis(config: Config, options: RedisOptions = {}): ScriptedRedis {
  const redis = new Redis({ ...options, ...redisConnection(config) });
  redis.defineCommand('reserve', { numberOfKeys: 4, lua: readFileSync(join(LUA_DIR, 'reserve.lua'), 'utf8') });
  redis.defineCommand('release', { numberOfKeys: 3, lua: readFileSync(join(LUA_DIR, 'release.lua'), 'utf8') });
  return redis as ScriptedRedis;
}

export type FlashRedis = ScriptedRedis;

/**
 * Reads a reservation's value, `itemId|userId|reservedAtMs|priceMinor|paymentWindowMs` (reserve.lua): the terms
 * the buyer was given at the 202, so the order is readable and payable before its workflow stores it.
 */
function parseReservation(saleId: number, orderId: string, value: string): OrderInput {
  const [itemId, userId, reservedAtMs, priceMinor, paymentWindowMs] = value.split('|');
  return { orderId, saleId, itemId: Number(itemId), userId, reservedAtMs: Number(reservedAtMs), priceMinor: Number(priceMinor), paymentWindowMs: Number(paymentWindowMs) };
}

/** Stock and reservations of sale events in Redis. Methods throw ioredis errors when Redis is unreachable. */
export class ReservationStore {
  constructor(private readonly redis: FlashRedis) {}

  /**
   * Atomically checks one-per-buyer-per-sale (I3) and stock (I1), reserves one unit for the order and appends
   * it to the sale's start queue (I4: the reservation and its queue entry exist together or not at all). The
   * entry carries the terms the buyer was given (price, payment window), so the workflow keeps them.
   * A refusal changes nothing.
   */
  async reserve(order: OrderInput): Promise<ReserveOutcome> {
    const keys = saleKeys(order.saleId);
    const reply = await this.redis.reserve(
      keys.stock(order.itemId),
      keys.buyers,
      keys.reservations,
      keys.startQueue,
      order.userId,
      order.orderId,
      String(order.itemId),
      String(order.reservedAtMs),
      String(order.priceMinor),
      String(order.paymentWindowMs),
    );
    switch (reply[0]) {
      case 1:
        return { kind: 'RESERVED', stockLeft: reply[1] };
      case 2:
        return { kind: 'ALREADY_PURCHASED', orderId: reply[1] };
      case 3:
        return { kind: 'SOLD_OUT' };
      default:
        return { kind: 'NOT_LOADED' };
    }
  }

  /**
   * Returns orderId's unit to stock if that order still holds it (I5: twice, or stale, frees nothing).
   * @returns true when a unit went back to stock
   */
  async release(saleId: number, itemId: number, orderId: string): Promise<boolean> {
    const keys = saleKeys(saleId);
    const released = await this.redis.release(keys.stock(itemId), keys.buyers, keys.reservations, orderId, String(itemId));
    return released === 1;
  }

  /** @returns the stock per item id; an item whose stock is not loaded maps to undefined */
  async stock(saleId: number, itemIds: readonly number[]): Promise<Map<number, number | undefined>> {
    const keys = saleKeys(saleId);
    const values = itemIds.length ? await this.redis.mget(itemIds.map((id) => keys.stock(id))) : [];
    return new Map(itemIds.map((id, i) => [id, values[i] == null ? undefined : Number(values[i])]));
  }

  /** @returns the order held by its reservation in its sale, with its terms, or undefined when the sale holds none for orderId */
  async findReservation(saleId: number, orderId: string): Promise<OrderInput | undefined> {
    const value = await this.redis.hget(saleKeys(saleId).reservations, orderId);
    return value === null ? undefined : parseReservation(saleId, orderId, value);
  }

  /** @returns every order holding a reservation in the sale (PENDING and PAID), read with HSCAN in pages */
  async reservations(saleId: number): Promise<OrderInput[]> {
    const out: OrderInput[] = [];
    const stream = this.redis.hscanStream(saleKeys(saleId).reservations, { count: 1000 });
    for await (const page of stream as AsyncIterable<string[]>) {
      for (let i = 0; i < page.length; i += 2) out.push(parseReservation(saleId, page[i], page[i + 1]));
    }
    return out;
  }

  /**
   * Loads a sale into Redis. Without rebuild, only stock keys that are missing are set (idempotent: a second
   * load changes nothing). With rebuild, the sale's keys are replaced in one MULTI from PostgreSQL's truth:
   * stock = quantity − pending − paid, and the live orders as buyers and reservations. Rebuild while the
   * sale takes no purchases: a reservation whose order PostgreSQL has not seen yet would be dropped. The start
   * queue is left as it is: its entries are orders still to be started, whatever Redis' view of the stock.
   */
  async load(
    saleId: number,
    items: readonly { itemId: number; available: number }[],
    liveOrders: readonly OrderInput[],
    rebuild: boolean,
  ): Promise<void> {
    const keys = saleKeys(saleId);
    const tx = this.redis.multi();
    if (rebuild) {
      tx.del(keys.buyers, keys.reservations, ...items.map((item) => keys.stock(item.itemId)));
      if (liveOrders.length) {
        tx.hset(keys.buyers, Object.fromEntries(liveOrders.map((o) => [o.userId, o.orderId])));
        tx.hset(keys.reservations, Object.fromEntries(liveOrders.map((o) => [o.orderId, `${o.itemId}|${o.userId}|${o.reservedAtMs}|${o.priceMinor}|${o.paymentWindowMs}`])));
      }
    }
    for (const item of items) tx.set(keys.stock(item.itemId), item.available, 'NX');
    const replies = (await tx.exec()) ?? [];
    const failed = replies.find(([err]) => err);
    if (failed) throw failed[0];
  }
}
