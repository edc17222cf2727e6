/**
 * Redis gatekeeper: stock, one live order per buyer per sale event, reservations recorded per order, and the
 * sale's start queues (the orders whose workflow is still to be started, read by src/starter/starter.ts), on a
 * single Redis or a Redis Cluster (REDIS_CLUSTER_NODES).
 *
 * A sale's keys are spread over its stock shards (src/reservation/layout.ts), each shard one hash tag, and every
 * script touches the keys of one shard only, passed in KEYS, so each runs on the node owning that slot:
 * - reserve.lua: the buyer's home shard also holds stock of the item: check, reserve and queue in one step.
 * - otherwise (or when the home shard's stock is out): claim.lua records the buyer on the home shard, take.lua
 *   reserves on the item's other shards in turn, and the claim is settled, or undone by unclaim.lua when no
 *   shard had a unit: a buyer hears 410 only once every shard of the item was found empty.
 * - release: release.lua on the unit's shard, then unclaim.lua on the buyer's home shard when it is another.
 * A crash between two of these steps leaves a claim; repairClaims (run by the starters) settles or undoes it.
 * ioredis' defineCommand sends EVALSHA and re-sends the script to a node that answers NOSCRIPT (a restarted or
 * failed-over node), so no SCRIPT LOAD is needed anywhere.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Redis, { Cluster, type RedisOptions } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import type { Config } from '../config';
import { redisClusterNodes, redisConnection } from '../connections';
import type { OrderInput } from '../order/types';
import { baseTag, homeShard, itemShardCount, LayoutError, placeTags, shardKeys, shardQuantity, type SaleLayout } from './layout';

const LUA_DIR = join(__dirname, '..', '..', 'lua');

type ReserveReply = [1, number] | [2, string] | [3] | [4];
type TakeReply = [1, number] | [3] | [4];

interface Scripts {
  reserve(stockKey: string, buyersKey: string, reservationsKey: string, startQueueKey: string, ...argv: string[]): Promise<ReserveReply>;
  take(stockKey: string, reservationsKey: string, startQueueKey: string, ...argv: string[]): Promise<TakeReply>;
  claim(buyersKey: string, claimsKey: string, ...argv: string[]): Promise<[1] | [2, string]>;
  unclaim(buyersKey: string, claimsKey: string, ...argv: string[]): Promise<0 | 1>;
  release(stockKey: string, buyersKey: string, reservationsKey: string, ...argv: string[]): Promise<0 | 1>;
}

/** The service's Redis client: one node or a cluster, with our Lua scripts defined. */
export type FlashRedis = (Redis | Cluster) & Scripts;

/** Outcome of a reservation attempt; errors as values for the API's single outcome→HTTP map. */
export type ReserveOutcome =
  | { kind: 'RESERVED'; stockLeft: number; stockShard: number }
  | { kind: 'ALREADY_PURCHASED'; orderId: string }
  | { kind: 'SOLD_OUT' }
  | { kind: 'NOT_LOADED' }
  /** Reserved, but fewer replicas than asked held it within the timeout: the order exists; its 202 is not given. */
  | { kind: 'NOT_REPLICATED'; orderId: string; replicas: number };

/** The order a release names: its unit goes back to its stock shard, its buyer's entry is cleared at home. */
export type ReleaseTarget = Pick<OrderInput, 'saleId' | 'itemId' | 'orderId' | 'userId' | 'stockShard'>;

/** Redis keys of shard 0 of a sale, the only shard of a one-shard sale. */
export function saleKeys(saleId: number) {
  return shardKeys(baseTag(saleId));
}

/**
 * Creates the ioredis client for the configured Redis (connections.ts: address or cluster seeds, logical
 * database, key prefix, TLS, ACL user) with our Lua scripts defined.
 * @param options client behaviour (retries, offline queue, auto-pipelining); the connection comes from config.
 *   On a cluster, the offline queue and auto-pipelining are the cluster client's, the rest each node's.
 */
export function createRedis(config: Config, options: RedisOptions = {}): FlashRedis {
  const nodes = redisClusterNodes(config);
  const { enableOfflineQueue, enableAutoPipelining, ...perNode } = options;
  const redis = nodes
    ? new Cluster(nodes, {
        redisOptions: { ...perNode, ...nodeConnection(config) },
        enableOfflineQueue,
        enableAutoPipelining,
        keyPrefix: config.REDIS_KEY_PREFIX,
      })
    : new Redis({ ...options, ...redisConnection(config), keyPrefix: config.REDIS_KEY_PREFIX });
  for (const [name, numberOfKeys] of [
    ['reserve', 4],
    ['take', 3],
    ['claim', 2],
    ['unclaim', 2],
    ['release', 3],
  ] as const) {
    redis.defineCommand(name, { numberOfKeys, lua: readFileSync(join(LUA_DIR, `${name}.lua`), 'utf8') });
  }
  return redis as FlashRedis;
}

/** A cluster node's settings: credentials and TLS; the addresses come from the slot map, a cluster has db 0 only. */
function nodeConnection(config: Config): Omit<RedisOptions, 'host' | 'port' | 'db'> {
  // eslint-disable-next-line @typescript-eslint/no-unused-vars -- dropped on purpose
  const { host, port, db, ...rest } = redisConnection(config);
  return rest;
}

/**
 * Reads a reservation's value, `itemId|userId|reservedAtMs|priceMinor|paymentWindowMs` (reserve.lua, take.lua):
 * the terms the buyer was given at the 202, so the order is readable and payable before its workflow stores it.
 */
function parseReservation(saleId: number, stockShard: number, orderId: string, value: string): OrderInput {
  const [itemId, userId, reservedAtMs, priceMinor, paymentWindowMs] = value.split('|');
  return {
    orderId,
    saleId,
    itemId: Number(itemId),
    userId,
    reservedAtMs: Number(reservedAtMs),
    priceMinor: Number(priceMinor),
    paymentWindowMs: Number(paymentWindowMs),
    stockShard,
  };
}

const reservationValue = (o: OrderInput) => `${o.itemId}|${o.userId}|${o.reservedAtMs}|${o.priceMinor}|${o.paymentWindowMs}`;

/** The shards an item's stock lives on, starting from `first` and going round: the order a buyer tries them in. */
function shardsFrom(first: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => (first + i) % count);
}

async function execAll(tx: ReturnType<Redis['multi']>): Promise<void> {
  const failed = ((await tx.exec()) ?? []).find(([err]) => err);
  if (failed) throw failed[0];
}

/** Where a sale's layout comes from: SaleLayouts (PostgreSQL, cached), or a fixed one in unit tests. */
export interface LayoutSource {
  /** @throws LayoutError when the sale does not exist */
  get(saleId: number): Promise<SaleLayout>;
}

const claimMember = (o: Pick<OrderInput, 'orderId' | 'itemId' | 'userId'>) => `${o.orderId}|${o.itemId}|${o.userId}`;

/** WAIT after each reservation: how many replicas must hold it, and how long to wait for them (ms). */
export interface Replication {
  replicas: number;
  timeoutMs: number;
}

/**
 * WAIT on the connection to the master of `key`'s slot: WAIT counts the replicas that acknowledged every write
 * this connection made so far, the caller's last one among them (others' writes on the shared connection only
 * make it wait a little more).
 * @returns how many replicas hold those writes
 * @throws when the client knows no connection to that master (a cluster between two slot maps)
 */
export async function waitForReplicas(redis: Redis | Cluster, key: string, { replicas, timeoutMs }: Replication): Promise<number> {
  if (!(redis instanceof Cluster)) return redis.wait(replicas, timeoutMs);
  const owner = redis.slots[calculateSlot(key)]?.[0];
  const node = redis.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw new Error(`no connection to the master of ${key} (${owner})`);
  return node.wait(replicas, timeoutMs);
}

/** Stock and reservations of sale events in Redis. Methods throw ioredis errors when Redis is unreachable. */
export class ReservationStore {
  /**
   * @param replication WAIT after a reservation (REDIS_WAIT_REPLICAS); none by default: a 202 then rests on the
   *   master alone, whose asynchronous replicas may not have it when a failover happens
   */
  constructor(
    private readonly redis: FlashRedis,
    readonly layouts: LayoutSource,
    private readonly replication: Replication = { replicas: 0, timeoutMs: 0 },
  ) {}

  /**
   * Atomically checks one-per-buyer-per-sale (I3) and stock (I1), reserves one unit for the order and appends
   * it to its shard's start queue (I4: the reservation and its queue entry exist together or not at all). The
   * entry carries the terms the buyer was given (price, payment window), so the workflow keeps them.
   * SOLD_OUT only once every stock shard of the item was found empty. A refusal changes nothing. With
   * replication asked, RESERVED only once WAIT says that many replicas hold the reservation and the buyer's
   * entry on their home shard (two masters when the unit came from another shard), else NOT_REPLICATED.
   * @throws ioredis errors; after a claim, a failure leaves it to repairClaims
   */
  async reserve(order: OrderInput): Promise<ReserveOutcome> {
    const outcome = await this.reserveOnce(order);
    if (outcome.kind !== 'RESERVED' || this.replication.replicas === 0) return outcome;
    const layout = await this.layouts.get(order.saleId);
    // The reservation's shard, and the buyer's home shard when it is another (the claim that holds I3 lives there).
    const shards = [...new Set([outcome.stockShard, homeShard(layout, order.userId)])];
    const held = await Promise.all(shards.map((k) => waitForReplicas(this.redis, shardKeys(tagOf(layout, k)).buyers, this.replication)));
    const replicas = Math.min(...held);
    return replicas >= this.replication.replicas ? outcome : { kind: 'NOT_REPLICATED', orderId: order.orderId, replicas };
  }

  private async reserveOnce(order: OrderInput): Promise<ReserveOutcome> {
    const layout = await this.layouts.get(order.saleId);
    const shards = itemShardCount(layout, order.itemId);
    const home = homeShard(layout, order.userId);
    const argv = [order.userId, order.orderId, String(order.itemId), String(order.reservedAtMs), String(order.priceMinor), String(order.paymentWindowMs)];
    if (home < shards) {
      const keys = shardKeys(tagOf(layout, home));
      const reply = await this.redis.reserve(keys.stock(order.itemId), keys.buyers, keys.reservations, keys.startQueue, ...argv);
      switch (reply[0]) {
        case 1:
          return { kind: 'RESERVED', stockLeft: reply[1], stockShard: home };
        case 2:
          return { kind: 'ALREADY_PURCHASED', orderId: reply[1] };
        case 4:
          return { kind: 'NOT_LOADED' };
        default:
          if (shards === 1) return { kind: 'SOLD_OUT' };
      }
    }
    return this.reserveElsewhere(layout, order, home, shards, argv);
  }

  /**
   * The buyer's home shard has no unit of the item (or no stock of it at all): claim the buyer at home, then try
   * the item's shards in turn, home last (a unit may have come back to it meanwhile).
   */
  private async reserveElsewhere(layout: SaleLayout, order: OrderInput, home: number, shards: number, argv: string[]): Promise<ReserveOutcome> {
    const homeKeys = shardKeys(tagOf(layout, home));
    const claimed = await this.redis.claim(homeKeys.buyers, homeKeys.claims, order.userId, order.orderId, String(order.itemId), String(Date.now()));
    if (claimed[0] === 2) return { kind: 'ALREADY_PURCHASED', orderId: claimed[1] };
    let notLoaded = false;
    for (const k of shardsFrom((home + 1) % shards, shards)) {
      const keys = shardKeys(tagOf(layout, k));
      const reply = await this.redis.take(keys.stock(order.itemId), keys.reservations, keys.startQueue, ...argv);
      if (reply[0] === 1) {
        await this.redis.zrem(homeKeys.claims, claimMember(order));
        return { kind: 'RESERVED', stockLeft: reply[1], stockShard: k };
      }
      notLoaded ||= reply[0] === 4;
    }
    await this.redis.unclaim(homeKeys.buyers, homeKeys.claims, order.userId, order.orderId, String(order.itemId));
    return notLoaded ? { kind: 'NOT_LOADED' } : { kind: 'SOLD_OUT' };
  }

  /**
   * Returns the order's unit to its stock shard if that order still holds it, and clears the buyer's entry on
   * their home shard while it names this order (I5: twice, or stale, frees nothing). Both steps are idempotent,
   * so a retry after a crash between them completes the release.
   * @returns true when a unit went back to stock in this call
   */
  async release(order: ReleaseTarget): Promise<boolean> {
    const layout = await this.layouts.get(order.saleId);
    const shard = order.stockShard ?? 0;
    const keys = shardKeys(tagOf(layout, shard));
    const released = await this.redis.release(keys.stock(order.itemId), keys.buyers, keys.reservations, order.orderId, String(order.itemId));
    const home = homeShard(layout, order.userId);
    if (home !== shard) {
      const homeKeys = shardKeys(tagOf(layout, home));
      await this.redis.unclaim(homeKeys.buyers, homeKeys.claims, order.userId, order.orderId, String(order.itemId));
    }
    return released === 1;
  }

  /** @returns per item id, the stock of each of its shards (undefined where a shard's stock is not loaded) */
  async stockByShard(saleId: number, itemIds: readonly number[]): Promise<Map<number, (number | undefined)[]>> {
    const layout = await this.layouts.get(saleId);
    const out = new Map(itemIds.map((id) => [id, [] as (number | undefined)[]]));
    await Promise.all(
      layout.tags.map(async (tag, k) => {
        const here = itemIds.filter((id) => itemShardCount(layout, id) > k);
        if (!here.length) return;
        const keys = shardKeys(tag);
        const values = await this.redis.mget(here.map((id) => keys.stock(id)));
        here.forEach((id, i) => ((out.get(id) as (number | undefined)[])[k] = values[i] == null ? undefined : Number(values[i])));
      }),
    );
    return out;
  }

  /** @returns the stock per item id, summed over its shards; undefined when any of its shards is not loaded */
  async stock(saleId: number, itemIds: readonly number[]): Promise<Map<number, number | undefined>> {
    const byShard = await this.stockByShard(saleId, itemIds);
    return new Map(
      [...byShard].map(([id, parts]) => [id, parts.length && parts.every((p) => p !== undefined) ? parts.reduce((a: number, p) => a + (p as number), 0) : undefined]),
    );
  }

  /** @returns the order held by its reservation in its sale, with its terms, or undefined when the sale holds none for orderId */
  async findReservation(saleId: number, orderId: string): Promise<OrderInput | undefined> {
    const layout = await this.layouts.get(saleId);
    const values = await Promise.all(layout.tags.map((tag) => this.redis.hget(shardKeys(tag).reservations, orderId)));
    const k = values.findIndex((v) => v !== null);
    return k < 0 ? undefined : parseReservation(saleId, k, orderId, values[k] as string);
  }

  /** @returns every order holding a reservation in the sale (PENDING and PAID), on every shard, read with HSCAN in pages */
  async reservations(saleId: number): Promise<OrderInput[]> {
    const layout = await this.layouts.get(saleId);
    const out: OrderInput[] = [];
    for (const [k, tag] of layout.tags.entries()) {
      const stream = this.redis.hscanStream(shardKeys(tag).reservations, { count: 1000 });
      for await (const page of stream as AsyncIterable<string[]>) {
        for (let i = 0; i < page.length; i += 2) out.push(parseReservation(saleId, k, page[i], page[i + 1]));
      }
    }
    return out;
  }

  /** @returns per buyer, the order their home shard records (I3), over all shards of the sale */
  async buyers(saleId: number): Promise<Map<string, string>> {
    const layout = await this.layouts.get(saleId);
    const out = new Map<string, string>();
    for (const tag of layout.tags) for (const [userId, orderId] of Object.entries(await this.redis.hgetall(shardKeys(tag).buyers))) out.set(userId, orderId);
    return out;
  }

  /** @returns the claims in progress (claim.lua) on every shard of the sale, `orderId|itemId|userId`; none at rest */
  async claims(saleId: number): Promise<string[]> {
    const layout = await this.layouts.get(saleId);
    return (await Promise.all(layout.tags.map((tag) => this.redis.zrange(shardKeys(tag).claims, 0, -1)))).flat();
  }

  /**
   * Loads a sale into Redis, shard by shard: an item's stock on shard k is its part of the quantity
   * (shardQuantity) minus the live orders whose unit that shard gave. Without rebuild, only stock keys that are
   * missing are set (idempotent: a second load changes nothing). With rebuild, each shard's keys are replaced
   * in one MULTI from PostgreSQL's truth: stock, the live orders as buyers (on their home shard) and
   * reservations (on their stock shard), and no claims. Rebuild while the sale takes no purchases: a
   * reservation whose order PostgreSQL has not seen yet would be dropped. The start queues are left as they
   * are: their entries are orders still to be started, whatever Redis' view of the stock.
   * @param liveOrders the sale's PENDING and PAID orders (PostgreSQL)
   */
  async load(saleId: number, items: readonly { itemId: number; quantity: number }[], liveOrders: readonly OrderInput[], rebuild: boolean): Promise<void> {
    const layout = await this.layouts.get(saleId);
    const taken = new Map<string, number>();
    for (const o of liveOrders) taken.set(`${o.itemId}/${o.stockShard ?? 0}`, (taken.get(`${o.itemId}/${o.stockShard ?? 0}`) ?? 0) + 1);
    for (const [k, tag] of layout.tags.entries()) {
      const keys = shardKeys(tag);
      const here = items.filter((item) => itemShardCount(layout, item.itemId) > k);
      const tx = this.redis.multi();
      if (rebuild) {
        tx.del(keys.buyers, keys.reservations, keys.claims, ...here.map((item) => keys.stock(item.itemId)));
        const homed = liveOrders.filter((o) => homeShard(layout, o.userId) === k);
        const held = liveOrders.filter((o) => (o.stockShard ?? 0) === k);
        if (homed.length) tx.hset(keys.buyers, Object.fromEntries(homed.map((o) => [o.userId, o.orderId])));
        if (held.length) tx.hset(keys.reservations, Object.fromEntries(held.map((o) => [o.orderId, reservationValue(o)])));
      }
      for (const item of here) {
        const part = shardQuantity(item.quantity, itemShardCount(layout, item.itemId), k);
        tx.set(keys.stock(item.itemId), part - (taken.get(`${item.itemId}/${k}`) ?? 0), 'NX');
      }
      await execAll(tx);
    }
  }

  /**
   * Repairs the claims older than olderThanMs that a crash left between claim.lua and its settling (an API
   * process that died mid-purchase): a claim whose order holds a reservation on some shard is settled; one whose
   * order holds none is undone (the buyer may buy again). A purchase still in flight past olderThanMs could take
   * a unit after its claim was undone; the buyer could then hold two reservations in Redis, and PostgreSQL's
   * one-live-order index (I3) rejects the second order, whose unit goes back.
   * @returns how many claims were settled and undone
   */
  async repairClaims(saleId: number, olderThanMs: number, nowMs = Date.now()): Promise<{ settled: number; undone: number }> {
    const layout = await this.layouts.get(saleId);
    const result = { settled: 0, undone: 0 };
    for (const tag of layout.tags) {
      const keys = shardKeys(tag);
      const stale = await this.redis.zrangebyscore(keys.claims, '-inf', nowMs - olderThanMs, 'LIMIT', 0, 100);
      for (const member of stale) {
        const [orderId, itemId, userId] = member.split('|');
        const shards = layout.tags.slice(0, itemShardCount(layout, Number(itemId)));
        const held = await Promise.all(shards.map((t) => this.redis.hexists(shardKeys(t).reservations, orderId)));
        if (held.some(Boolean)) {
          await this.redis.zrem(keys.claims, member);
          result.settled += 1;
        } else {
          await this.redis.unclaim(keys.buyers, keys.claims, userId, orderId, itemId);
          result.undone += 1;
        }
      }
    }
    return result;
  }

  /**
   * Chooses the tags of a new sale's shards from this client's view of the cluster (layout.ts placeTags).
   * @throws LayoutError when the cluster has fewer masters than shards
   */
  readonly placeShards = (saleId: number, shards: number): string[] => {
    if (!(this.redis instanceof Cluster)) return placeTags(saleId, shards);
    const slots = this.redis.slots;
    return placeTags(saleId, shards, (tag) => slots[calculateSlot(tag)]?.[0], new Set(slots.map((nodes) => nodes[0])).size);
  };

  /**
   * @returns the shards of the sale that share a master with another (after a resharding moved slots), as
   *   `shard k: host:port`; empty on a single node and while the placement holds
   */
  async sharedMasters(saleId: number): Promise<string[]> {
    if (!(this.redis instanceof Cluster)) return [];
    const layout = await this.layouts.get(saleId);
    const cluster = this.redis;
    await new Promise<void>((resolve, reject) => cluster.refreshSlotsCache((err) => (err ? reject(err) : resolve())));
    const owners = layout.tags.map((tag) => cluster.slots[calculateSlot(tag)]?.[0]);
    return owners.flatMap((owner, k) => (owners.indexOf(owner) !== k || owners.lastIndexOf(owner) !== k ? [`shard ${k}: ${owner}`] : []));
  }
}

/** @throws LayoutError when the layout has no shard k (an order naming a shard its sale does not have) */
function tagOf(layout: SaleLayout, k: number): string {
  const tag = layout.tags[k];
  if (tag === undefined) throw new LayoutError(`sale ${layout.saleId} has no stock shard ${k}`);
  return tag;
}
