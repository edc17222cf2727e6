/**
 * Sale set-up: creates a sale event with its items in PostgreSQL and loads (or rebuilds) its stock in Redis.
 * Used by the admin route and by `npm run sale`.
 */
import type { Pool } from 'pg';
import { z } from 'zod';
import { inTransaction } from '../infra/db';
import { cancelledOrders, liveOrders } from '../order/rows';
import { MAX_SHARDS } from '../reservation/layout';

/**
 * Units a sale may hold in all: each is one entry of a Redis list (about 5 bytes) that a load stages, at about
 * 1.2 s per million on a 2-core machine (docs/performance.md, unit slots).
 */
export const MAX_SALE_UNITS = 1_000_000;
import { RebuildUnderWay, StockLoader, type StockSource } from '../reservation/loading';
import type { ReservationStore } from '../reservation/store';
import type { ShardPlacer } from '../reservation/placement';
import { closedMark } from './controls';

const LAST_RFC3339_MS = Date.UTC(10000, 0, 1);
/** Names and product ids: no control characters (PostgreSQL text refuses NUL; the others have no business there). */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const LABEL = /^[^\u0000-\u001f\u007f]+$/;

/** Input of a new sale event; times are ISO-8601, money in minor units, durations in ms. */
export const SaleInput = z
  .object({
    name: z.string().min(1).max(200).regex(LABEL, 'no control characters'),
    startsAt: z.iso.datetime({ offset: true }),
    endsAt: z.iso.datetime({ offset: true }),
    paymentWindowMs: z.number().int().positive().max(86_400_000).default(600_000),
    items: z
      .array(
        z.object({
          productId: z.string().min(1).max(100).regex(LABEL, 'no control characters'),
          /** What buyers read on the sale page; the productId when absent. */
          name: z.string().min(1).max(200).regex(LABEL, 'no control characters').optional(),
          quantity: z.number().int().min(0).max(MAX_SALE_UNITS),
          priceMinor: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
          currency: z.string().regex(/^[A-Z]{3}$/).default('EUR'),
          /** Stock shards of a hot item, each on its own Redis Cluster master (src/reservation/layout.ts); 1 when absent. */
          stockShards: z.number().int().min(1).max(MAX_SHARDS).optional(),
        }),
      )
      .min(1)
      .max(1000),
  })
  .strict()
  .refine((s) => Date.parse(s.endsAt) > Date.parse(s.startsAt), { message: 'endsAt must be after startsAt', path: ['endsAt'] })
  // An offset can push 9999-12-31 into year 10000 in UTC, which RFC 3339 (and our replies) cannot write.
  .refine((s) => Date.parse(s.endsAt) < LAST_RFC3339_MS, { message: 'endsAt must be before 10000-01-01T00:00:00Z', path: ['endsAt'] })
  .refine((s) => s.items.reduce((n, i) => n + i.quantity, 0) <= MAX_SALE_UNITS, { message: `the items' quantities add up to at most ${MAX_SALE_UNITS}`, path: ['items'] })
  .refine((s) => new Set(s.items.map((i) => i.productId)).size === s.items.length, {
    message: 'productId must be unique within a sale',
    path: ['items'],
  });
export type SaleInput = z.infer<typeof SaleInput>;

export interface SaleItem {
  itemId: number;
  productId: string;
  name: string;
  quantity: number;
  /** Live (PENDING and PAID) orders of the item: the units they hold (I1), counted from orders_live_unit. */
  sold: number;
  priceMinor: number;
  currency: string;
  stockShards: number;
}

export interface Sale {
  saleId: number;
  name: string;
  startsAt: Date;
  endsAt: Date;
  paymentWindowMs: number;
  items: SaleItem[];
}

/**
 * Inserts the sale and its items in one transaction, with the hash tags of its stock shards (as many as its
 * items ask for at most) as placeShards chooses them from the Redis slot map (src/reservation/placement.ts).
 * @returns the stored sale with item ids
 * @throws LayoutError (from placeShards) when the shards cannot sit on distinct masters; nothing is stored
 */
export async function createSale(pool: Pool, input: SaleInput, placeShards: ShardPlacer): Promise<Sale> {
  const saleId = await inTransaction(pool, async (tx) => {
    const sale = await tx.query<{ id: number }>(
      'INSERT INTO sale_events (name, starts_at, ends_at, payment_window_ms) VALUES ($1, $2, $3, $4) RETURNING id',
      // As instants: RFC 3339 allows offsets up to ±23:59, PostgreSQL's input ±15:59.
      [input.name, new Date(input.startsAt), new Date(input.endsAt), input.paymentWindowMs],
    );
    const id = sale.rows[0].id;
    const shards = Math.max(...input.items.map((item) => item.stockShards ?? 1));
    if (shards > 1) await tx.query('UPDATE sale_events SET shard_tags = $2 WHERE id = $1', [id, placeShards(id, shards)]);
    await tx.query('INSERT INTO stock_shards (sale_id, shard) SELECT $1, k FROM generate_series(0, $2 - 1) AS k', [id, shards]);
    for (const item of input.items) {
      await tx.query('INSERT INTO items (sale_id, product_id, name, quantity, price_minor, currency, stock_shards) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
        id,
        item.productId,
        item.name ?? item.productId,
        item.quantity,
        item.priceMinor,
        item.currency,
        item.stockShards ?? 1,
      ]);
    }
    return id;
  });
  const sale = await findSale(pool, saleId);
  if (!sale) throw new Error(`sale ${saleId} vanished after insert`);
  return sale;
}

/**
 * @param itemColumns the items' columns to read (table alias i), as the item's fields
 * @returns the sale's row and its items, or undefined when there is no such sale
 */
async function readSale<Item>(pool: Pool, saleId: number, itemColumns: string): Promise<(Omit<Sale, 'items'> & { items: Item[] }) | undefined> {
  const sale = await pool.query<Omit<Sale, 'items'>>(
    `SELECT id AS "saleId", name, starts_at AS "startsAt", ends_at AS "endsAt", payment_window_ms AS "paymentWindowMs"
     FROM sale_events WHERE id = $1`,
    [saleId],
  );
  if (sale.rowCount !== 1) return undefined;
  const items = await pool.query<Item & object>(`SELECT ${itemColumns} FROM items i WHERE i.sale_id = $1 ORDER BY i.id`, [saleId]);
  return { ...sale.rows[0], items: items.rows };
}

/** @returns the sale with its items, or undefined */
export function findSale(pool: Pool, saleId: number): Promise<Sale | undefined> {
  return readSale<SaleItem>(
    pool,
    saleId,
    `i.id AS "itemId", i.product_id AS "productId", i.name, i.quantity,
     (SELECT count(*)::int FROM orders o WHERE o.item_id = i.id AND o.status IN ('PENDING', 'PAID')) AS sold,
     i.price_minor::float8 AS "priceMinor", i.currency, i.stock_shards AS "stockShards"`,
  );
}

/** A sale as its public view shows it: Sale without what only the house reads (each item's quantity, live orders, shards). */
export interface SaleListing extends Omit<Sale, 'items'> {
  items: Pick<SaleItem, 'itemId' | 'productId' | 'name' | 'priceMinor' | 'currency'>[];
}

/** @returns the sale with its items as the public view shows them (findSale without its count of live orders), or undefined */
export function findSaleListing(pool: Pool, saleId: number): Promise<SaleListing | undefined> {
  return readSale<SaleListing['items'][number]>(pool, saleId, `i.id AS "itemId", i.product_id AS "productId", i.name, i.price_minor::float8 AS "priceMinor", i.currency`);
}

/** @returns the highest sale id made so far (ids are handed out in order), 0 when there is none */
export async function highestSaleId(pool: Pool): Promise<number> {
  const res = await pool.query<{ id: number }>('SELECT coalesce(max(id), 0) AS id FROM sale_events');
  return res.rows[0].id;
}

/** Thrown by loadSale when a rebuild has nothing to restore, would go ahead beside shards that kept their data without force, or another rebuild runs. */
export class RebuildRefused extends Error {}

/** Thrown by loadSale (without rebuild) when a shard lost its data after it was loaded: only a rebuild restores what it held. */
export class RebuildNeeded extends Error {}

/**
 * The sale's stock shards' epochs in PostgreSQL, moved on under the loader's locks (src/reservation/loading.ts).
 * Each move is its own statement, committed before the live orders are read: a store of an order (Orders.place)
 * reads its shard's epoch FOR SHARE, so the UPDATE waits for the stores under way, which the read then sees, and
 * the stores after it find the new epoch.
 */
function stockSource(pool: Pool, saleId: number): StockSource {
  const moved = async (sql: string, shards: readonly number[]) => {
    const res = await pool.query<{ shard: number; epoch: number }>(sql, [saleId, shards]);
    return new Map(res.rows.map((r) => [r.shard, r.epoch]));
  };
  return {
    async firstLoad(shards) {
      const epochs = await moved('UPDATE stock_shards SET epoch = 1 WHERE sale_id = $1 AND shard = ANY($2) AND epoch = 0 RETURNING shard, epoch', shards);
      const before = shards.filter((k) => !epochs.has(k));
      if (before.length) {
        throw new RebuildNeeded(`sale ${saleId}: shard(s) ${before.join(', ')} lost the data they were loaded with: rebuild (?rebuild=true) to restore the orders they held`);
      }
      return { epochs, liveOrders: await liveOrders(pool, saleId), mark: await closedMark(pool, saleId) };
    },
    async undoFirstLoad(shards) {
      await pool.query('UPDATE stock_shards SET epoch = 0 WHERE sale_id = $1 AND shard = ANY($2) AND epoch = 1', [saleId, shards]);
    },
    async nextEpoch(shards) {
      const epochs = await moved('UPDATE stock_shards SET epoch = epoch + 1 WHERE sale_id = $1 AND shard = ANY($2) RETURNING shard, epoch', shards);
      return { epochs, liveOrders: await liveOrders(pool, saleId), mark: await closedMark(pool, saleId), cancelled: await cancelledOrders(pool, saleId) };
    },
  };
}

/**
 * Loads the sale's stock into Redis: per stock shard never loaded, each item's units (idempotent: a shard loaded
 * is left as it is). With rebuild, restores the shards that lost the sale's data (their loaded mark gone) from
 * PostgreSQL and the other shards' reservations, and leaves the shards that kept theirs as they are
 * (src/reservation/loading.ts). While any shard kept its data, a rebuild needs force: orders whose entries were
 * only on a lost shard and that no starter had read are gone, and the operator says they know
 * (docs/operations.md, A shard lost its data).
 * Without rebuild, a shard that lost the data it was loaded with is refused (RebuildNeeded), whatever PostgreSQL
 * holds yet: the reservations and entries only Redis knew would be missing (their units lost, their buyers free
 * to buy twice). Loads and rebuilds of a shard run one at a time.
 * @returns the loaded sale, or undefined when there is no such sale
 * @throws RebuildRefused when no shard lost its data, or some kept theirs and force is not given, or another
 *   rebuild of a shard runs (a load it waits for); RebuildNeeded when a load finds a shard that lost its data
 */
export async function loadSale(pool: Pool, store: ReservationStore, saleId: number, rebuild: boolean, force = false): Promise<Sale | undefined> {
  const sale = await findSale(pool, saleId);
  if (!sale) return undefined;
  const loader = new StockLoader(store);
  const items = sale.items.map((item) => ({ itemId: item.itemId, quantity: item.quantity }));
  const source = stockSource(pool, saleId);
  if (!rebuild) {
    await loader.load(saleId, items, source);
    return sale;
  }
  const holding = await loader.holding(saleId);
  const lost = holding.flatMap((holds, k) => (holds ? [] : [k]));
  const kept = holding.flatMap((holds, k) => (holds ? [k] : []));
  if (!lost.length) throw new RebuildRefused(`sale ${saleId}: every stock shard holds its data; nothing to rebuild`);
  if (kept.length && !force) {
    throw new RebuildRefused(
      `sale ${saleId}: shard(s) ${lost.join(', ')} lost their data, shard(s) ${kept.join(', ')} kept theirs; a rebuild restores the lost ones only, ` +
        'and orders whose entries were only there and not yet read by a starter are gone (force to go ahead)',
    );
  }
  try {
    await loader.rebuild(saleId, items, source, lost);
  } catch (err) {
    if (err instanceof RebuildUnderWay) throw new RebuildRefused(`sale ${saleId}: ${err.message}`);
    throw err;
  }
  return sale;
}
