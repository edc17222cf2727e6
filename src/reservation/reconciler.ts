/**
 * The reconciler (docs/design.md, "The reconciler"): brings each loaded stock shard of a sale back in line with
 * PostgreSQL, the truth, after Redis lost or reordered writes (a failover, a release that failed). A pass reads
 * PostgreSQL first, then the shard, plans the repairs (drift.ts) and applies each as one compare-and-set
 * (lua/repair.lua). Incremental passes look at the orders changed since the last one; a full pass, less often,
 * compares everything. One process at a time reconciles a shard (a lease in the shard); every repair is safe twice.
 */
import type { Cluster } from 'ioredis';
import type { Pool } from 'pg';
import { liveOrders } from '../order/rows';
import { changedSince, rowStates, type ChangedOrder } from '../order/truth';
import { idempotent, type FlashRedis } from './client';
import type { SaleMark } from './closing';
import { planRepairs, toLookUp, type ItemUnits, type Repair, type ShardView } from './drift';
import { parseReservation, reservationValue } from './formats';
import { homeShard, shardKeys, tagOf, type LayoutSource, type SaleLayout } from './layout';
import { applyRepairs } from './repairs';
import { hmgetByShard, loadedEpochs, readShard } from './shardReads';

/** What a sale's reconciliation reads of PostgreSQL besides its orders: its items and state (src/sale/). */
export interface SaleSource {
  items(saleId: number): Promise<ItemUnits[]>;
  mark(saleId: number): Promise<SaleMark>;
}

export interface ReconcilerOptions {
  /** How long a final order's reservation is left to its own compensation before the reconciler releases it (ms). */
  graceMs: number;
  /** How often rounds run (ms): the incremental look-back covers it. */
  everyMs: number;
  /** A full pass of a sale this often (ms), shared by every process; and at once after a master changed. */
  fullEveryMs: number;
  /** How long a shard stays this process's after its last pass (ms): another takes over once it runs out. */
  leaseMs: number;
  /** This process's lease token. */
  owner: string;
}

/** Takes or renews a shard's lease for its owner. */
const LEASE = `if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0`;
const LIVE = new Set(['PENDING', 'PAID']);
const FINAL = new Set(['EXPIRED', 'CANCELLED', 'REJECTED']);


/** What a round did for one sale: its pass (full or incremental) and the repairs that wrote. */
export interface SalePass {
  saleId: number;
  full: boolean;
  ms: number;
  repairs: Repair[];
}

/** Sales passed over at once in a round (each its own round trips to PostgreSQL and Redis). */
const PASSES_AT_ONCE = 8;

/** Marks a sale's full pass as taken by one process for fullEveryMs, so that processes share the schedule. */
const FULL_PASS = `return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') and 1 or 0`;

/**
 * Reconciles sales in rounds. Methods throw pg or ioredis errors when a store is unreachable (a round's failure on
 * one sale is that sale's: reported, and the others go on).
 */
export class Reconciler {
  /** When each sale's full pass was last due here (ms): staggered over fullEveryMs from the first round on. */
  private readonly fullDueAt = new Map<number, number>();
  /** PostgreSQL's clock at the last incremental read (ms). */
  private sinceMs: number | undefined;
  /** The run ids of the Redis nodes that held the masters at the last round. */
  private nodes: string | undefined;
  /** Sales whose full pass a master's change calls for: run here whoever took the period's turn. */
  private readonly forced = new Set<number>();

  constructor(
    private readonly redis: FlashRedis,
    private readonly layouts: LayoutSource,
    private readonly pool: Pool,
    private readonly source: SaleSource,
    private readonly options: ReconcilerOptions,
  ) {}

  /**
   * One round over the sales: an incremental pass over each sale that has orders changed since the last round, and
   * a full pass over each whose turn it is (every fullEveryMs, taken by one process for all), or over every sale
   * after a master changed (a failover, a node restarted: what it lost no order's change shows).
   * @param onFailure told of a sale whose pass failed (the round goes on with the others)
   * @returns each sale's pass that ran
   */
  async round(saleIds: readonly number[], onFailure: (saleId: number, err: unknown) => void, nowMs = Date.now()): Promise<SalePass[]> {
    const nodes = await this.masters();
    if (this.nodes !== undefined && nodes !== this.nodes) for (const saleId of saleIds) this.forced.add(saleId);
    this.nodes = nodes;
    const lookBackMs = this.options.graceMs + this.options.everyMs + 1000;
    const changed = await changedSince(this.pool, saleIds, this.sinceMs === undefined ? undefined : this.sinceMs - lookBackMs, lookBackMs);
    this.sinceMs = changed.nowMs;
    const bySale = new Map<number, ChangedOrder[]>();
    for (const o of changed.orders) bySale.set(o.saleId, [...(bySale.get(o.saleId) ?? []), o]);
    const passes: SalePass[] = [];
    // The newest sales first (the ones on sale now), a few at once: after a master's change every sale's full
    // pass is due in the same round.
    const due = [...saleIds].sort((a, b) => b - a).filter((saleId) => bySale.has(saleId) || this.fullDue(saleId, nowMs));
    let next = 0;
    const lane = async () => {
      while (next < due.length) {
        const saleId = due[next++];
        const full = this.fullDue(saleId, nowMs);
        const startedAt = performance.now();
        try {
          const pass = await this.pass(saleId, full, this.forced.has(saleId), bySale.get(saleId) ?? []);
          // Done here or by the process that took the period's turn; a failed one is tried again next round.
          if (full) this.fullDueAt.set(saleId, nowMs + this.options.fullEveryMs);
          this.forced.delete(saleId);
          if (pass) passes.push({ saleId, ...pass, ms: performance.now() - startedAt });
        } catch (err) {
          onFailure(saleId, err);
        }
      }
    };
    await Promise.all(Array.from({ length: PASSES_AT_ONCE }, lane));
    return passes;
  }

  /** @returns whether the sale's full pass is due here (its first one at once, then every fullEveryMs) */
  private fullDue(saleId: number, nowMs: number): boolean {
    return this.forced.has(saleId) || (this.fullDueAt.get(saleId) ?? nowMs) <= nowMs;
  }

  /** @returns the run ids of the masters now, sorted: a new one means a failover or a restart */
  private async masters(): Promise<string> {
    const nodes = 'nodes' in this.redis && typeof this.redis.nodes === 'function' ? (this.redis as Cluster).nodes('master') : [this.redis];
    const ids = await Promise.all(nodes.map(async (node) => /run_id:(\w+)/.exec(await node.info('server'))?.[1] ?? ''));
    return ids.sort().join(',');
  }

  /**
   * One sale's pass on the shards whose lease this process holds; undefined when another process holds them all.
   * @param forced a master changed: the full pass runs here, whoever took the period's turn
   */
  private async pass(saleId: number, full: boolean, forced: boolean, changed: readonly ChangedOrder[]): Promise<{ full: boolean; repairs: Repair[] } | undefined> {
    const layout = await this.layouts.get(saleId);
    // The period's full pass is taken for every process: the one that takes it runs it, the others skip it.
    const turn = () => idempotent(() => this.redis.eval(FULL_PASS, 1, shardKeys(tagOf(layout, 0)).fullPass, this.options.owner, String(this.options.fullEveryMs)));
    const fullHere = full && (forced || (await turn()) === 1);
    if (!fullHere && !changed.length) return undefined;
    const held = await this.lease(layout);
    if (!held.length) return undefined;
    const planned = fullHere ? await this.fullPlan(layout, held) : await this.changedPlan(layout, held, changed);
    return { full: fullHere, repairs: await applyRepairs(this.redis, this.pool, layout, planned) };
  }

  /** @returns the shards whose lease this process holds now */
  private async lease(layout: SaleLayout): Promise<number[]> {
    const held = await Promise.all(layout.tags.map((tag) => idempotent(() => this.redis.eval(LEASE, 1, shardKeys(tag).reconciler, this.options.owner, String(this.options.leaseMs)))));
    return held.flatMap((h, k) => (h === 1 ? [k] : []));
  }

  /** A full pass's repairs: PostgreSQL's live orders and state, then every held shard, compared (drift.ts). */
  private async fullPlan(layout: SaleLayout, held: readonly number[]): Promise<{ repairs: Repair[]; epochs: Map<number, string> }> {
    const [live, mark, items] = await Promise.all([liveOrders(this.pool, layout.saleId), this.source.mark(layout.saleId), this.source.items(layout.saleId)]);
    const views = (await Promise.all(held.map((k) => readShard(this.redis, layout, k, items)))).filter((v): v is ShardView => v !== undefined);
    const truth = { live, mark, items };
    const rows = await rowStates(this.pool, toLookUp(truth, views));
    return { repairs: planRepairs(layout, truth, views, rows, this.options.graceMs), epochs: new Map(views.map((v) => [v.k, v.epoch])) };
  }

  /**
   * An incremental pass's repairs: the sale's orders changed since the last round (with a look-back of the grace
   * and more, so a final order is looked at again once its compensation's time is over), each against its
   * reservation and its buyer's entry, read in one HMGET per shard.
   */
  private async changedPlan(layout: SaleLayout, held: readonly number[], orders: readonly ChangedOrder[]): Promise<{ repairs: Repair[]; epochs: Map<number, string> }> {
    const epochs = await loadedEpochs(this.redis, layout, held);
    // A repair on a shard another process holds is left to it (apply skips it).
    const mine = orders.filter((o) => epochs.has(o.stockShard ?? 0) || epochs.has(homeShard(layout, o.userId)));
    if (!mine.length) return { repairs: [], epochs };
    const [reservations, entries] = await Promise.all([
      hmgetByShard(this.redis, layout, mine.map((o) => [o.stockShard ?? 0, 'reservations', o.orderId])),
      hmgetByShard(this.redis, layout, mine.map((o) => [homeShard(layout, o.userId), 'buyers', o.userId])),
    ]);
    const repairs: Repair[] = [];
    for (const [i, o] of mine.entries()) {
      const [reservation, entry] = [reservations[i], entries[i]];
      const k = o.stockShard ?? 0;
      const home = homeShard(layout, o.userId);
      if (FINAL.has(o.status) && o.ageMs >= this.options.graceMs) {
        const release = reservation && { orderId: o.orderId, userId: o.userId, itemId: o.itemId, unit: parseReservation(0, k, o.orderId, reservation).unit as number, value: reservation, unitBack: true, home };
        if (release) repairs.push({ k, kind: 'release', ...release, seen: `reservation of a ${o.status} order` });
        else if (entry === o.orderId) repairs.push({ k: home, kind: 'clearBuyer', userId: o.userId, orderId: o.orderId, seen: `an entry naming a ${o.status} order` });
      }
      if (LIVE.has(o.status)) {
        if (!reservation && epochs.has(k)) repairs.push({ k, kind: 'restore', order: o, value: reservationValue({ ...o, stockEpoch: Number(epochs.get(k)) }), seen: 'a live order without its reservation' });
        if (entry === null) repairs.push({ k: home, kind: 'setBuyer', userId: o.userId, orderId: o.orderId, expected: '', seen: "a live order's buyer entry missing" });
      }
    }
    return { repairs, epochs };
  }
}
