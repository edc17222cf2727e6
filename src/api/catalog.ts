/**
 * Per-process cache of what the purchase route needs to know about an item (its sale, window, price), so a
 * purchase costs no PostgreSQL round trip. A found entry is re-read after refreshMs, an unknown id after
 * 500 ms; concurrent misses for one id share one query.
 */
import type { Pool } from 'pg';

export interface CatalogItem {
  itemId: number;
  saleId: number;
  startsAtMs: number;
  endsAtMs: number;
  paymentWindowMs: number;
  /** Minor currency units. */
  priceMinor: number;
  /** Stock shards of the item (1 unless it is a hot item split over several). */
  stockShards: number;
}

interface Entry {
  item: CatalogItem | undefined;
  readAtMs: number;
}

/** Entries kept at most; past that the cache starts afresh (ids are probed by anyone, so it must be bounded). */
const MAX_ENTRIES = 100_000;
const UNKNOWN_REFRESH_MS = 500;

export class Catalog {
  private readonly entries = new Map<number, Entry>();
  private readonly inflight = new Map<number, Promise<CatalogItem | undefined>>();

  constructor(
    private readonly pool: Pool,
    private readonly refreshMs: number,
  ) {}

  /** @returns the item, or undefined when no such item exists. @throws pg errors when PostgreSQL is unreachable */
  async get(itemId: number, nowMs = Date.now()): Promise<CatalogItem | undefined> {
    const entry = this.entries.get(itemId);
    // An unknown id is re-read sooner, so an item created just after someone probed its id sells at once.
    if (entry && nowMs - entry.readAtMs < (entry.item ? this.refreshMs : UNKNOWN_REFRESH_MS)) return entry.item;
    let pending = this.inflight.get(itemId);
    if (!pending) {
      pending = this.read(itemId).finally(() => this.inflight.delete(itemId));
      this.inflight.set(itemId, pending);
    }
    return pending;
  }

  private async read(itemId: number): Promise<CatalogItem | undefined> {
    const res = await this.pool.query<CatalogItem>(
      `SELECT i.id AS "itemId", i.sale_id AS "saleId", (extract(epoch FROM s.starts_at) * 1000)::float8 AS "startsAtMs",
              (extract(epoch FROM s.ends_at) * 1000)::float8 AS "endsAtMs", s.payment_window_ms AS "paymentWindowMs",
              i.price_minor::float8 AS "priceMinor", i.stock_shards AS "stockShards"
       FROM items i JOIN sale_events s ON s.id = i.sale_id WHERE i.id = $1`,
      [itemId],
    );
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    this.entries.set(itemId, { item: res.rows[0], readAtMs: Date.now() });
    return res.rows[0];
  }
}
