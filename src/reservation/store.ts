/**
 * Redis as the gatekeeper: stock, one live order per buyer per sale, reservations, each written with the order's
 * start queue entry, by scripts that touch one stock shard each (layout.ts). A buyer whose home shard lacks the
 * item's stock is claimed there, then served by the item's other shards (claim, take, unclaim). Every call is
 * idempotent per orderId and rerun when its reply was lost (client.ts); claims.ts repairs a crash between steps.
 */
import type { OrderInput } from '../order/types';
import { DEFAULT_CLAIM_IDLE_MS } from '../config';
import { claimLeaseMs } from './claims';
import { idempotent, type FlashRedis, type SaleClosed } from './client';
import { claimMember, entryFields, reservationTerms } from './formats';
import { homeShard, itemShardCount, shardKeys, tagOf, type LayoutSource, type SaleLayout } from './layout';
import type { ReplicationBarrier } from './replication';
import { ReservationView } from './views';

/** Outcome of a reservation attempt; errors as values for the API's single outcome→HTTP map. */
export type ReserveOutcome =
  /**
   * unit: the unit the order holds, stockEpoch: its shard's epoch when it was taken (both absent when a rerun
   * found the order already ended: its unit went back).
   */
  | { kind: 'RESERVED'; stockLeft: number; stockShard: number; unit?: number; stockEpoch?: number }
  | { kind: 'ALREADY_PURCHASED'; orderId: string }
  | { kind: 'SOLD_OUT' }
  | { kind: 'NOT_LOADED' }
  /** The sale is paused or ended (its closed mark, src/sale/controls.ts): nothing reserved. */
  | { kind: 'CLOSED'; state: SaleClosed }
  /** Reserved, but fewer replicas than asked held it within the timeout: the order exists and ends; no 202. */
  | { kind: 'NOT_REPLICATED'; orderId: string; replicas: number }
  /** Units came and went on the item's shards through every pass: no moment was found at which all were empty. */
  | { kind: 'UNDECIDED' };

/** The unit and epoch of a RESERVED reply, both or neither (a rerun after the order ended has neither). */
const held = (unit: number | undefined, stockEpoch: number | undefined) => (unit !== undefined && stockEpoch !== undefined ? { unit, stockEpoch } : {});

/** The order a release names: its unit goes back to its stock shard, its buyer's entry is cleared at home. */
export type ReleaseTarget = Pick<OrderInput, 'saleId' | 'itemId' | 'orderId' | 'userId' | 'stockShard'>;

/**
 * Full passes over an item's shards before a buyer is told it is neither reserved nor sold out (UNDECIDED): a
 * pass that finds every shard empty answers SOLD_OUT only if no unit came back to a shard since it was looked at.
 */
const MAX_PASSES = 3;

/** What one look at a stock shard found. */
type Look = { reserved: { stockLeft: number; node: string; unit?: number; stockEpoch?: number } } | { empty: number } | { notLoaded: true } | { leaseOver: true } | { closed: SaleClosed };

/** @returns the shards an item's stock lives on, starting from `first` and going round: the order a buyer tries them in */
function shardsFrom(first: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => (first + i) % count);
}

/** The keys reserve.lua takes a unit with, in its order, whether it checks the buyer too (reserve) or not (take). */
function unitKeys(keys: ReturnType<typeof shardKeys>, itemId: number): [stock: string, reservations: string, startQueue: string, returns: string, released: string, loaded: string, closed: string] {
  return [keys.stock(itemId), keys.reservations, keys.startQueue, keys.returns(itemId), keys.released, keys.loaded, keys.closed];
}

/**
 * Stock and reservations of sale events in Redis: reserve and release, and the reads of ReservationView. Methods
 * throw ioredis errors when Redis stays unreachable.
 */
export class ReservationStore {
  /** The reads of what Redis holds for a sale, on the same client (views.ts). */
  readonly view: ReservationView;
  /** How old a claim may be when its unit is taken (reserve.lua as `take`), ms: half the age at which claim repair undoes it. */
  private readonly claimLeaseMs: number;

  /**
   * @param options.barrier with options.replicas: waits for that many replicas after a reservation
   *   (REDIS_WAIT_REPLICAS); none: a 202 rests on the master alone, whose asynchronous replicas may not have it
   *   when a failover happens
   * @param options.claimIdleMs the age at which claim repair undoes a claim (STARTER_CLAIM_IDLE_MS)
   */
  constructor(
    /** The client it runs on, which src/reservation/loading.ts shares. */
    readonly redis: FlashRedis,
    readonly layouts: LayoutSource,
    readonly options: { barrier?: ReplicationBarrier; replicas?: number; claimIdleMs?: number } = {},
  ) {
    this.view = new ReservationView(redis, layouts);
    this.claimLeaseMs = claimLeaseMs(options.claimIdleMs ?? DEFAULT_CLAIM_IDLE_MS);
  }

  /**
   * Atomically checks one-per-buyer-per-sale (I3) and stock (I1), reserves one unit for the order and appends it
   * to its shard's start queue (I4: the reservation and its queue entry exist together or not at all). The entry
   * carries the terms the buyer was given (price, payment window), so the workflow keeps them. A refusal changes
   * nothing. Run twice for one order (a retry), it answers as the first run did.
   * - SOLD_OUT only when every stock shard of the item was empty at one moment during the call.
   * - With replication asked, RESERVED only once that many replicas of each node that wrote the reservation and
   *   the buyer's entry hold them, else NOT_REPLICATED (the order exists, its workflow starts, and it ends).
   * @param traceParent the W3C traceparent the queue entry carries to the starter (tracing on), or none
   * @throws ioredis errors when Redis stays unreachable; after a claim, a failure leaves it to claim repair
   */
  async reserve(order: OrderInput, traceParent?: string): Promise<ReserveOutcome> {
    const layout = await this.layouts.get(order.saleId);
    const shards = itemShardCount(layout, order.itemId);
    const home = homeShard(layout, order.userId);
    if (home < shards) {
      const keys = shardKeys(tagOf(layout, home));
      const reply = await idempotent(() =>
        this.redis.reserve(
          ...unitKeys(keys, order.itemId),
          keys.buyers,
          order.orderId,
          reservationTerms(order),
          order.userId,
          ...entryFields(order, traceParent),
        ),
      );
      switch (reply[0]) {
        case 'RESERVED':
          return this.replicated(order, { kind: 'RESERVED', stockLeft: reply[1], stockShard: home, ...held(reply[3], reply[4]) }, [reply[2]]);
        case 'ALREADY_PURCHASED':
          return { kind: 'ALREADY_PURCHASED', orderId: reply[1] };
        case 'CLOSED':
          return { kind: 'CLOSED', state: reply[1] };
        default:
          if (shards === 1) return { kind: reply[0] };
      }
    }
    return this.reserveElsewhere(layout, order, home, shards, traceParent);
  }

  /**
   * The buyer's home shard has no unit of the item (or no stock of it at all): claim the buyer at home, then look
   * at the item's shards in turn, home last. A pass that finds none with a unit reads every shard again: if none
   * has a unit and none had one come back since it was looked at (its returns count unchanged), there was a
   * moment, between the pass and this reading, at which the item had no unit anywhere: SOLD_OUT. Otherwise the
   * buyer goes round again, at most MAX_PASSES times.
   */
  private async reserveElsewhere(layout: SaleLayout, order: OrderInput, home: number, shards: number, traceParent: string | undefined): Promise<ReserveOutcome> {
    const homeKeys = shardKeys(tagOf(layout, home));
    const member = claimMember(order);
    const claimed = await idempotent(() => this.redis.claim(homeKeys.buyers, homeKeys.claims, homeKeys.loaded, order.userId, order.orderId, member));
    if (claimed[0] === 'ALREADY_PURCHASED') return { kind: 'ALREADY_PURCHASED', orderId: claimed[1] };
    if (claimed[0] === 'NOT_LOADED') return { kind: 'NOT_LOADED' };
    const [, claimedAtMs, homeNode] = claimed;
    const unclaim = () => idempotent(() => this.redis.unclaim(homeKeys.buyers, homeKeys.claims, homeKeys.loaded, order.userId, order.orderId, member));
    for (let pass = 0; pass < MAX_PASSES; pass++) {
      const emptyAt = new Map<number, number>();
      let notLoaded = false;
      for (const k of shardsFrom((home + 1) % shards, shards)) {
        const look = await this.take(layout, order, k, claimedAtMs, traceParent);
        if ('reserved' in look) {
          // Settling the claim is housekeeping: failed, claim repair settles it; the buyer holds the unit either way.
          await idempotent(() => this.redis.zrem(homeKeys.claims, member)).catch(() => undefined);
          const { stockLeft, unit, stockEpoch } = look.reserved;
          return this.replicated(order, { kind: 'RESERVED', stockLeft, stockShard: k, ...held(unit, stockEpoch) }, [look.reserved.node, homeNode]);
        }
        // A take stalled past the claim's lease: no take of this press can land any more (each refuses a claim
        // past its lease, and every earlier one answered), so the claim is undone now rather than by repair.
        if ('leaseOver' in look || 'closed' in look) {
          await unclaim();
          return 'closed' in look ? { kind: 'CLOSED', state: look.closed } : { kind: 'UNDECIDED' };
        }
        if ('empty' in look) emptyAt.set(k, look.empty);
        else notLoaded = true;
      }
      if (notLoaded) {
        await unclaim();
        return { kind: 'NOT_LOADED' };
      }
      if (await this.stillEmpty(layout, order.itemId, emptyAt)) {
        await unclaim();
        return { kind: 'SOLD_OUT' };
      }
    }
    await unclaim();
    return { kind: 'UNDECIDED' };
  }

  private async take(layout: SaleLayout, order: OrderInput, k: number, claimedAtMs: number, traceParent: string | undefined): Promise<Look> {
    const keys = shardKeys(tagOf(layout, k));
    const reply = await idempotent(() =>
      this.redis.take(
        ...unitKeys(keys, order.itemId),
        order.orderId,
        reservationTerms(order),
        String(claimedAtMs),
        String(this.claimLeaseMs),
        ...entryFields(order, traceParent),
      ),
    );
    switch (reply[0]) {
      case 'RESERVED':
        return { reserved: { stockLeft: reply[1], node: reply[2], unit: reply[3], stockEpoch: reply[4] } };
      case 'SOLD_OUT':
        return { empty: reply[1] };
      case 'NOT_LOADED':
        return { notLoaded: true };
      case 'LEASE_OVER':
        return { leaseOver: true };
      case 'CLOSED':
        return { closed: reply[1] };
    }
  }

  /** @returns whether every shard of the item still has no unit and has had none come back since `emptyAt` saw it */
  private async stillEmpty(layout: SaleLayout, itemId: number, emptyAt: ReadonlyMap<number, number>): Promise<boolean> {
    const now = await Promise.all(
      [...emptyAt].map(async ([k, returns]) => {
        const keys = shardKeys(tagOf(layout, k));
        const [[, loaded], [, stock], [, seen]] = (await idempotent(() =>
          this.redis.multi().exists(keys.loaded).llen(keys.stock(itemId)).get(keys.returns(itemId)).exec(),
        )) as [[null, number], [null, number], [null, string | null]];
        // A shard that lost its data since it was looked at is not known to be empty: its rebuild may free units.
        return loaded === 1 && stock === 0 && Number(seen ?? 0) === returns;
      }),
    );
    return now.every(Boolean);
  }

  /** The outcome, once the replicas asked hold what the named nodes wrote (the barrier), else NOT_REPLICATED. */
  private async replicated(order: OrderInput, outcome: Extract<ReserveOutcome, { kind: 'RESERVED' }>, nodes: string[]): Promise<ReserveOutcome> {
    const { barrier, replicas = 0 } = this.options;
    if (!barrier || replicas === 0) return outcome;
    const held = Math.min(...(await Promise.all([...new Set(nodes)].map((node) => barrier.held(node)))));
    return held >= replicas ? outcome : { kind: 'NOT_REPLICATED', orderId: order.orderId, replicas: held };
  }

  /**
   * Returns the order's unit to its stock shard if that order still holds it, and clears the buyer's entry on
   * their home shard while it names this order (I5: twice, or stale, frees nothing). Both steps are idempotent,
   * so a retry after a crash between them completes the release.
   * @param unitBack false when another live order holds the order's unit (PostgreSQL refused the order for it,
   *   I1; compensationFor): the reservation goes and the unit stays out of stock, so that Redis does not hand it
   *   out again
   * @throws an ioredis ReplyError ITEM_MISMATCH when the order's reservation is for another item, SHARD_NOT_LOADED
   *   while one of the two shards lost its data and is not rebuilt yet (try again later)
   */
  async release(order: ReleaseTarget, unitBack = true): Promise<void> {
    const layout = await this.layouts.get(order.saleId);
    const shard = order.stockShard ?? 0;
    const keys = shardKeys(tagOf(layout, shard));
    await idempotent(() =>
      this.redis.release(keys.stock(order.itemId), keys.buyers, keys.reservations, keys.returns(order.itemId), keys.released, keys.loaded, order.orderId, String(order.itemId), unitBack ? '1' : '0'),
    );
    const home = homeShard(layout, order.userId);
    if (home !== shard) {
      const homeKeys = shardKeys(tagOf(layout, home));
      await idempotent(() => this.redis.unclaim(homeKeys.buyers, homeKeys.claims, homeKeys.loaded, order.userId, order.orderId, claimMember(order)));
    }
  }
}
