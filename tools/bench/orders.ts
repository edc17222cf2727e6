/**
 * Benchmark of PostgreSQL's order writes on one hot item (`npm run bench -- orders`): each live order holds its own
 * numbered unit (unit slots, today's schema), against the design it replaced, where every order of an item
 * updated its counter row `items.sold` and an item's writes queued on that row's lock (5d1f4c8). For each write —
 * place (stored PENDING), pay from the reservation (stored PAID with its payments row, by an order that has no
 * row yet), expire (PENDING → EXPIRED, its unit released in Redis) — and each placement — N orders of one item of
 * N units (hot), and N orders spread over SPREAD_ITEMS items — it writes N orders, BENCH_ORDERS_IN_FLIGHT at a time
 * on a pool of as many connections, on
 *   - SLOTS: the Orders class (src/order/store.ts) on the real schema, in sales made by createSale and loaded into
 *     Redis by loadSale; order k of an item holds unit k;
 *   - COUNTER (the baseline): 5d1f4c8's statements, each write running those its path ran (pay: the UPDATE that
 *     finds no row, the SELECT, then storePaid; expire: settle, then the release in Redis), on a scratch schema
 *     bench_counter made afresh with 5d1f4c8's tables (items with `sold` and its CHECK).
 * Every cell has a sale of its own and distinct buyers; expire's orders are first placed, untimed, with their
 * deadline a minute past. SLOTS and COUNTER take turns going first, and so do hot and spread, after a warm-up of
 * each. It prints orders/s and p50/p99 latency (ms) per cell, hot ÷ spread per schema and write, and SLOTS ÷
 * COUNTER per write on the hot item. Appends a JSON line to reports/bench.jsonl. Asserts nothing.
 *
 * Options (environment): BENCH_ORDERS_N (3000 orders per cell), BENCH_ORDERS_IN_FLIGHT (64),
 * BENCH_ORDERS_WARMUP (300 orders placed per schema, untimed).
 */
import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { loadConfig, type Config } from '../../src/config';
import { pgConnection } from '../../src/infra/connections';
import { createPool, inTransaction } from '../../src/infra/db';
import { newOrderId } from '../../src/order/orderId';
import { Orders } from '../../src/order/store';
import { paymentDeadlineMs, type OrderInput } from '../../src/order/types';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import { baseTag, SaleLayouts, shardKeys } from '../../src/reservation/layout';
import { ReservationStore } from '../../src/reservation/store';
import { createSale, loadSale } from '../../src/sale/sales';
import { appendResult } from '../shared/benchResults';
import { shardPlacer } from '../../src/reservation/placement';

const N = Number(process.env.BENCH_ORDERS_N ?? 3000);
const IN_FLIGHT = Number(process.env.BENCH_ORDERS_IN_FLIGHT ?? 64);
const WARMUP = Number(process.env.BENCH_ORDERS_WARMUP ?? 300);
const SPREAD_ITEMS = 16;
const PRICE = 500;
const WINDOW_MS = 600_000;

const WRITES = ['place', 'pay', 'expire'] as const;
const PLACEMENTS = ['hot', 'spread'] as const;
type Write = (typeof WRITES)[number];
type Placement = (typeof PLACEMENTS)[number];
type SchemaName = 'SLOTS' | 'COUNTER';

export interface CellFigures {
  ordersPerS: number;
  p50Ms: number;
  p99Ms: number;
}

/** Each write of one order: whether it did what it is for (a write that did not would make the figures lie). */
type Writes = Record<Write, (order: OrderInput) => Promise<boolean>>;

interface Schema {
  /** Makes a sale of `items` items of `quantity` units each, ready for orders. @returns its id and item ids, in order */
  sale(items: number, quantity: number): Promise<{ saleId: number; itemIds: number[] }>;
  /** The Redis hash tag of the sale's one shard. */
  tag(saleId: number): string;
  /** Options of the cell's pool's connections. */
  connection?: { options: string };
  writes(pool: Pool): Writes;
}

// 5d1f4c8's tables, as its migrations leave them, without the order_events ledger that no write here touches.
const COUNTER_SCHEMA = `
DROP SCHEMA IF EXISTS bench_counter CASCADE;
CREATE SCHEMA bench_counter;
SET LOCAL search_path = bench_counter;
CREATE TABLE sale_events (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  starts_at timestamptz NOT NULL, ends_at timestamptz NOT NULL,
  payment_window_ms integer NOT NULL CHECK (payment_window_ms > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  shard_tags text[] CONSTRAINT sale_events_shard_tags CHECK (shard_tags IS NULL OR cardinality(shard_tags) BETWEEN 1 AND 64),
  CHECK (ends_at > starts_at)
);
CREATE TABLE items (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sale_id integer NOT NULL REFERENCES sale_events (id),
  product_id text NOT NULL CHECK (length(product_id) BETWEEN 1 AND 100),
  quantity integer NOT NULL CHECK (quantity >= 0),
  sold integer NOT NULL DEFAULT 0 CHECK (sold >= 0),
  price_minor bigint NOT NULL CHECK (price_minor >= 0),
  currency char(3) NOT NULL DEFAULT 'EUR',
  name text NOT NULL CONSTRAINT items_name_length CHECK (length(name) BETWEEN 1 AND 200),
  stock_shards smallint NOT NULL DEFAULT 1 CHECK (stock_shards BETWEEN 1 AND 64),
  CONSTRAINT items_sold_within_quantity CHECK (sold <= quantity),
  UNIQUE (sale_id, product_id)
);
CREATE INDEX items_sale_id ON items (sale_id);
CREATE TABLE orders (
  id uuid PRIMARY KEY,
  sale_id integer NOT NULL REFERENCES sale_events (id),
  item_id integer NOT NULL REFERENCES items (id),
  user_id text NOT NULL,
  status text NOT NULL CHECK (status IN ('PENDING', 'PAID', 'EXPIRED', 'REJECTED')),
  price_minor bigint NOT NULL CHECK (price_minor >= 0),
  reason text, payment_id text,
  reserved_at timestamptz NOT NULL, deadline_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
  stock_shard smallint NOT NULL DEFAULT 0 CHECK (stock_shard >= 0)
);
CREATE UNIQUE INDEX orders_one_live_per_buyer ON orders (sale_id, user_id) WHERE status IN ('PENDING', 'PAID');
CREATE INDEX orders_item_status ON orders (item_id, status);
CREATE TABLE payments (
  payment_id text PRIMARY KEY,
  order_id uuid NOT NULL UNIQUE REFERENCES orders (id),
  amount_minor bigint NOT NULL CHECK (amount_minor >= 0),
  taken_at timestamptz NOT NULL DEFAULT now()
);`;

// The counter design's statements (git show 5d1f4c8:src/order/store.ts), windowOpen written out.
const COUNTER_PLACE = `WITH inserted AS (
           INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, reserved_at, deadline_at, stock_shard)
           VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING id
         ), counted AS (
           UPDATE items SET sold = sold + 1 WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted) RETURNING sold
         )
         SELECT count(*)::int AS inserted FROM inserted`;
const COUNTER_PAY = `WITH paid AS (
             UPDATE orders SET status = 'PAID', payment_id = $2, updated_at = now()
             WHERE id = $1 AND status = 'PENDING' AND deadline_at > now() AND price_minor = $3 RETURNING id
           ), taken AS (
             INSERT INTO payments (payment_id, order_id, amount_minor) SELECT $2, id, $3 FROM paid
           )
           SELECT count(*)::int AS paid FROM paid`;
const COUNTER_PAY_ROW = `SELECT status, payment_id AS "paymentId", price_minor::float8 AS "priceMinor", deadline_at > now() AS open FROM orders WHERE id = $1`;
const COUNTER_STORE_PAID = `WITH inserted AS (
           INSERT INTO orders (id, sale_id, item_id, user_id, status, price_minor, payment_id, reserved_at, deadline_at, stock_shard)
           SELECT $1, $2, $3, $4, 'PAID', $5, $6, $7, $8, $9 WHERE $8::timestamptz > now()
           ON CONFLICT DO NOTHING RETURNING id
         ), counted AS (
           UPDATE items SET sold = sold + 1 WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted) RETURNING sold
         ), taken AS (
           INSERT INTO payments (payment_id, order_id, amount_minor) SELECT $6, id, $5 FROM inserted
         )
         SELECT count(*)::int AS inserted, $8::timestamptz > now() AS open FROM inserted`;
const COUNTER_SETTLE = `WITH expired AS (
         UPDATE orders SET status = 'EXPIRED', updated_at = now()
         WHERE id = $1 AND status = 'PENDING' AND NOT deadline_at > $2 RETURNING item_id
       ), uncounted AS (
         UPDATE items SET sold = sold - 1 FROM expired WHERE items.id = expired.item_id
       )
       SELECT CASE WHEN EXISTS (SELECT 1 FROM expired) THEN 'EXPIRED' ELSE o.status END AS status,
              o.payment_id AS "paymentId", o.reason, o.price_minor::float8 AS "priceMinor"
       FROM orders o WHERE o.id = $1`;

const paymentOf = (order: OrderInput) => ({ paymentId: `pay-${order.orderId}`, amount: order.priceMinor });

/** The counter design's writes on bench_counter; its expire releases the unit as its settle did, on a shard of its own. */
function counterWrites(pool: Pool, reservations: ReservationStore): Writes {
  const terms = (o: OrderInput) => [o.orderId, o.saleId, o.itemId, o.userId, o.priceMinor, new Date(o.reservedAtMs), new Date(paymentDeadlineMs(o)), o.stockShard ?? 0];
  return {
    place: async (o) => (await pool.query<{ inserted: number }>(COUNTER_PLACE, terms(o))).rows[0].inserted === 1,
    pay: async (o) => {
      const { paymentId, amount } = paymentOf(o);
      if ((await pool.query<{ paid: number }>(COUNTER_PAY, [o.orderId, paymentId, amount])).rows[0].paid === 1) return false;
      if ((await pool.query(COUNTER_PAY_ROW, [o.orderId])).rows.length) return false;
      const values = [o.orderId, o.saleId, o.itemId, o.userId, o.priceMinor, paymentId, new Date(o.reservedAtMs), new Date(paymentDeadlineMs(o)), o.stockShard ?? 0];
      return (await pool.query<{ inserted: number }>(COUNTER_STORE_PAID, values)).rows[0].inserted === 1;
    },
    expire: async (o) => {
      if ((await pool.query<{ status: string }>(COUNTER_SETTLE, [o.orderId, new Date()])).rows[0]?.status !== 'EXPIRED') return false;
      await reservations.release(o);
      return true;
    },
  };
}

/** The Orders class's writes; expire is settle then the workflow's compensation step (the counter design's settle released too). */
function slotsWrites(orders: Orders, reservations: ReservationStore): Writes {
  return {
    place: async (o) => (await orders.place(o)).status === 'PENDING',
    pay: async (o) => {
      const paid = await orders.pay(o.orderId, paymentOf(o), o);
      return paid !== undefined && 'status' in paid && paid.stored === true;
    },
    expire: async (o) => {
      if ((await orders.settle(o, Date.now()))?.status !== 'EXPIRED') return false;
      await reservations.release(o);
      return true;
    },
  };
}

/** Runs write on every order, IN_FLIGHT at a time. @throws when a write did not do what it is for */
async function run(label: string, orders: OrderInput[], write: (order: OrderInput) => Promise<boolean>): Promise<CellFigures> {
  const latencies: number[] = new Array(orders.length);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(IN_FLIGHT, orders.length) }, async () => {
      while (next < orders.length) {
        const k = next++;
        const start = performance.now();
        if (!(await write(orders[k]))) throw new Error(`${label}: order ${k} (${orders[k].orderId}) was not written`);
        latencies[k] = performance.now() - start;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  latencies.sort((a, b) => a - b);
  const at = (q: number) => Math.round(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] * 100) / 100;
  return { ordersPerS: Math.round(orders.length / seconds), p50Ms: at(0.5), p99Ms: at(0.99) };
}

/** The bench's clients: a small pool for set-ups, Redis, a store for each schema. */
interface Bench {
  config: Config;
  setup: Pool;
  redis: FlashRedis;
  schemas: Record<SchemaName, Schema>;
}

function openBench(): Bench {
  const config = loadConfig({ ...process.env, LOG_LEVEL: 'warn', PG_POOL_MAX: '4' });
  const setup = createPool(config);
  const redis = createRedis(config);
  const store = new ReservationStore(redis, new SaleLayouts(setup));
  // bench_counter's sales are not in public.sale_events: each has one shard of its own, marked loaded when made.
  const counterTag = (saleId: number) => `{bench-counter:${saleId}}`;
  const counterStore = new ReservationStore(redis, { get: async (saleId) => ({ saleId, tags: [counterTag(saleId)], itemShards: new Map() }) });
  const saleTerms = { startsAt: new Date(Date.now() - 60_000).toISOString(), endsAt: new Date(Date.now() + 86_400_000).toISOString(), paymentWindowMs: WINDOW_MS };
  const slots: Schema = {
    sale: async (items, quantity) => {
      const productIds = Array.from({ length: items }, (_, i) => `p${i}`);
      const input = { name: `bench-orders-${randomUUID()}`, ...saleTerms, items: productIds.map((productId) => ({ productId, quantity, priceMinor: PRICE, currency: 'EUR' })) };
      const sale = await createSale(setup, input, shardPlacer(store.redis));
      await loadSale(setup, store, sale.saleId, false);
      return { saleId: sale.saleId, itemIds: sale.items.map((i) => i.itemId) };
    },
    tag: baseTag,
    writes: (pool) => slotsWrites(new Orders(pool, store.view), store),
  };
  const counter: Schema = {
    sale: async (items, quantity) => {
      const sale = await setup.query<{ id: number }>('INSERT INTO bench_counter.sale_events (name, starts_at, ends_at, payment_window_ms) VALUES ($1, $2, $3, $4) RETURNING id', [
        `bench-orders-${randomUUID()}`,
        saleTerms.startsAt,
        saleTerms.endsAt,
        WINDOW_MS,
      ]);
      const saleId = sale.rows[0].id;
      const rows = await setup.query<{ id: number }>(
        `INSERT INTO bench_counter.items (sale_id, product_id, name, quantity, price_minor) SELECT $1, 'p' || i, 'p' || i, $2, $3 FROM generate_series(0, $4 - 1) i ORDER BY i RETURNING id`,
        [saleId, quantity, PRICE, items],
      );
      await redis.set(shardKeys(counterTag(saleId)).loaded, '1');
      return { saleId, itemIds: rows.rows.map((r) => r.id).sort((a, b) => a - b) };
    },
    tag: counterTag,
    connection: { options: '-c search_path=bench_counter' },
    writes: (pool) => counterWrites(pool, counterStore),
  };
  return { config, setup, redis, schemas: { SLOTS: slots, COUNTER: counter } };
}

/** One cell: count orders of a fresh sale written by `write`, on a pool of IN_FLIGHT connections opened beforehand. */
async function cell(bench: Bench, name: SchemaName, write: Write, placement: Placement, count: number): Promise<CellFigures> {
  const schema = bench.schemas[name];
  const items = placement === 'hot' ? 1 : SPREAD_ITEMS;
  const { saleId, itemIds } = await schema.sale(items, Math.ceil(count / items));
  const past = write === 'expire' ? 120_000 : 0;
  const orders = Array.from(
    { length: count },
    (_, k): OrderInput => ({
      orderId: newOrderId(saleId),
      saleId,
      itemId: itemIds[k % items],
      userId: `buyer-${k}`,
      priceMinor: PRICE,
      paymentWindowMs: past ? 60_000 : WINDOW_MS,
      reservedAtMs: Date.now() - past,
      unit: Math.floor(k / items) + 1,
      // The epoch its shard's first load gave it: PostgreSQL stores a live order only under its shard's epoch.
      stockShard: 0,
      stockEpoch: 1,
    }),
  );
  const pool = new Pool({ ...pgConnection(bench.config), ...schema.connection, max: IN_FLIGHT });
  pool.on('error', () => undefined);
  const label = `${name} ${write} ${placement}`;
  try {
    const clients = await Promise.all(Array.from({ length: IN_FLIGHT }, () => pool.connect()));
    clients.forEach((c) => c.release());
    const writes = schema.writes(pool);
    if (write === 'expire') await run(`${label} (placing)`, orders, writes.place);
    return await run(label, orders, writes[write]);
  } finally {
    await pool.end();
    const keys = shardKeys(schema.tag(saleId));
    await bench.redis.del(keys.loaded, keys.closed, keys.buyers, keys.reservations, keys.released, keys.startQueue, keys.claims, ...itemIds.flatMap((id) => [keys.stock(id), keys.returns(id)]));
  }
}

type Figures = Record<Write, Record<Placement, Record<SchemaName, CellFigures>>>;

/** Every write and placement on both schemas, taking turns at going first. */
async function measureAll(bench: Bench): Promise<Figures> {
  const figures = {} as Figures;
  let turn = 0;
  for (const [i, write] of WRITES.entries()) {
    figures[write] = {} as Record<Placement, Record<SchemaName, CellFigures>>;
    for (const placement of i % 2 ? [...PLACEMENTS].reverse() : PLACEMENTS) {
      const order: SchemaName[] = turn++ % 2 ? ['COUNTER', 'SLOTS'] : ['SLOTS', 'COUNTER'];
      const byName = {} as Record<SchemaName, CellFigures>;
      for (const name of order) byName[name] = await cell(bench, name, write, placement, N);
      figures[write][placement] = byName;
    }
  }
  return figures;
}

/** Prints the cells and their ratios. @returns the ratios */
function printFigures(figures: Figures) {
  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  const ratios = Object.fromEntries(
    WRITES.map((w) => {
      const f = figures[w];
      return [
        w,
        {
          'SLOTS hot÷spread': ratio(f.hot.SLOTS.ordersPerS, f.spread.SLOTS.ordersPerS),
          'COUNTER hot÷spread': ratio(f.hot.COUNTER.ordersPerS, f.spread.COUNTER.ordersPerS),
          'hot SLOTS÷COUNTER': ratio(f.hot.SLOTS.ordersPerS, f.hot.COUNTER.ordersPerS),
        },
      ];
    }),
  );
  const rows = Object.fromEntries(
    WRITES.flatMap((w) =>
      PLACEMENTS.map((p) => {
        const { SLOTS, COUNTER } = figures[w][p];
        const columns = { 'SLOTS /s': SLOTS.ordersPerS, 'SLOTS p50 ms': SLOTS.p50Ms, 'SLOTS p99 ms': SLOTS.p99Ms };
        return [`${w} ${p}`, { ...columns, 'COUNTER /s': COUNTER.ordersPerS, 'COUNTER p50 ms': COUNTER.p50Ms, 'COUNTER p99 ms': COUNTER.p99Ms }];
      }),
    ),
  );
  console.table(rows);
  console.log('ratios of orders/s (hot÷spread per schema; SLOTS÷COUNTER on the hot item)');
  console.table(ratios);
  return ratios;
}

async function main(): Promise<void> {
  const bench = openBench();
  try {
    await inTransaction(bench.setup, (tx) => tx.query(COUNTER_SCHEMA));
    console.log(`orders bench: ${N} orders per cell, ${IN_FLIGHT} in flight on as many connections; spread = over ${SPREAD_ITEMS} items`);
    for (const name of ['SLOTS', 'COUNTER'] as const) await cell(bench, name, 'place', 'spread', WARMUP);
    const figures = await measureAll(bench);
    const ratios = printFigures(figures);
    appendResult('orders', { orders: N, inFlight: IN_FLIGHT, spreadItems: SPREAD_ITEMS, figures, ratios });
  } finally {
    await bench.setup.query('DROP SCHEMA IF EXISTS bench_counter CASCADE').catch(() => undefined);
    await Promise.allSettled([bench.setup.end(), bench.redis.quit()]);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
