/**
 * Shared test set-up against the real local stack (scripts/services.sh up): configuration with a unique task
 * queue, buyer tokens signed like a real issuer would, and sales created through the production code path.
 */
import { randomUUID } from 'node:crypto';
import { request, type IncomingHttpHeaders } from 'node:http';
import { SignJWT } from 'jose';
import type { Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { auditSale } from '../../src/audit';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import type { Order, OrderInput, OrderStatus } from '../../src/order/types';
import { createKafka } from '../../src/infra/kafka';
import { Orders } from '../../src/order/store';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import { SaleLayouts, shardKeys } from '../../src/reservation/layout';
import { createSale, loadSale, type Sale } from '../../src/sale/sales';
import { shardPlacer } from '../../src/reservation/placement';
import { freePort, until } from './processes';

/** Limits so high that no suite meets them but those that test the limits (which set their own). */
export const NO_RATE_LIMITS = { RATE_LIMIT_PER_IP: '1000000000', RATE_LIMIT_PER_BUYER: '1000000000', RATE_LIMIT_READS_PER_IP: '1000000000' };

/**
 * Configuration for a test: silent logs, free ports for the API's two doors, a task queue no other suite polls,
 * purchases without the sale gate and without rate limits (every suite's crowd comes from loopback), which the
 * suites that test them turn on: edge (both), contract and the browser (the gate); the demo and the fault
 * campaign run their processes with the defaults (the crowd's one IP lifted).
 */
export function testConfig(overrides: Record<string, string> = {}): Config {
  return loadConfig({
    ...process.env,
    LOG_LEVEL: 'silent',
    API_PORT: '0',
    INTERNAL_API_PORT: '0',
    TEMPORAL_TASK_QUEUE: `test-${randomUUID()}`,
    SALE_GATE_REQUIRED: 'false',
    ...NO_RATE_LIMITS,
    ...overrides,
  });
}

/**
 * Signs a buyer JWT with the configured HS256 secret.
 * @param expiresIn jose time span ('1h') or epoch seconds
 */
export async function buyerToken(config: Config, sub: string, expiresIn: string | number = '1h'): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(new TextEncoder().encode(config.JWT_SECRET));
}

export interface Clients {
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  orders: Orders;
  /** Sales made through createTestSale with these clients. */
  sales: number[];
  /** Deletes the start queues of the suite's sales (so no later suite's starter takes their entries), then disconnects. */
  close(): Promise<void>;
}

/** PostgreSQL pool and Redis client for direct checks; close() in afterAll, after the suite's API has stopped. */
export function connectClients(config: Config): Clients {
  const pool = createPool(config);
  const redis = createRedis(config);
  const sales: number[] = [];
  const store = new ReservationStore(redis, new SaleLayouts(pool));
  return {
    pool,
    redis,
    store,
    orders: new Orders(pool, store.view),
    sales,
    close: async () => {
      // One DEL per stream: a cluster refuses a DEL whose keys lie in several slots.
      const queues = (await Promise.all(sales.map(async (id) => (await store.layouts.get(id)).tags.map((tag) => shardKeys(tag).startQueue))).catch(() => [])).flat();
      await Promise.allSettled(queues.map((key) => redis.del(key)));
      await Promise.allSettled([pool.end(), redis.quit()]);
    },
  };
}

export interface TestSaleOptions {
  /** The sale event's name (default: test-<uuid>). */
  name?: string;
  quantities?: number[];
  /** Items' names as buyers read them (default: none given, so the product id). */
  names?: string[];
  priceMinor?: number;
  paymentWindowMs?: number;
  /** Stock shards per item (default 1 each). */
  stockShards?: number[];
  /** Sale start relative to now, ms (negative: already started). */
  startsInMs?: number;
  durationMs?: number;
}

/** Creates a sale (default: one item of 10 units, started a minute ago) and loads its stock into Redis. */
export async function createTestSale(clients: Clients, options: TestSaleOptions = {}): Promise<Sale> {
  const start = Date.now() + (options.startsInMs ?? -60_000);
  const sale = await createSale(clients.pool, {
    name: options.name ?? `test-${randomUUID()}`,
    startsAt: new Date(start).toISOString(),
    endsAt: new Date(start + (options.durationMs ?? 3_600_000)).toISOString(),
    paymentWindowMs: options.paymentWindowMs ?? 600_000,
    items: (options.quantities ?? [10]).map((quantity, i) => ({
      productId: `p${i}`,
      ...(options.names?.[i] !== undefined && { name: options.names[i] }),
      quantity,
      priceMinor: options.priceMinor ?? 1999,
      currency: 'EUR',
      ...(options.stockShards?.[i] !== undefined && { stockShards: options.stockShards[i] }),
    })),
  }, shardPlacer(clients.store.redis));
  await loadSale(clients.pool, clients.store, sale.saleId, false);
  clients.sales.push(sale.saleId);
  return sale;
}

/**
 * Puts a sale back as if it had never been loaded (a test's set-up for a first load): its shards' Redis keys
 * deleted and their epochs 0. Deleting the keys alone is a data loss, which only a rebuild restores.
 */
export async function unload(clients: Clients, saleId: number): Promise<void> {
  const layout = await clients.store.layouts.get(saleId);
  const items = await clients.pool.query<{ id: number }>('SELECT id FROM items WHERE sale_id = $1', [saleId]);
  for (const tag of layout.tags) {
    const keys = shardKeys(tag);
    await clients.redis.del(keys.loaded, keys.closed, keys.buyers, keys.reservations, keys.claims, ...items.rows.flatMap((item) => [keys.stock(item.id), keys.returns(item.id)]));
  }
  await clients.pool.query('UPDATE stock_shards SET epoch = 0 WHERE sale_id = $1', [saleId]);
}

/**
 * Reserves an order's unit in Redis (ReservationStore.reserve), as the purchase route does; throws unless reserved.
 * @returns the order holding the unit Redis gave it, from the shard that gave it: as its start queue entry hands it
 *   to its workflow (Orders.place stores no live order without its unit)
 */
export async function reserveUnit(clients: Pick<Clients, 'store'>, order: OrderInput): Promise<OrderInput> {
  const outcome = await clients.store.reserve(order);
  if (outcome.kind !== 'RESERVED' || outcome.unit === undefined) throw new Error(`order ${order.orderId} not reserved: ${JSON.stringify(outcome)}`);
  return { ...order, unit: outcome.unit, stockShard: outcome.stockShard, stockEpoch: outcome.stockEpoch };
}

/** An order's row as PostgreSQL holds it (the tests' own read), or undefined when there is none. */
export async function orderRow(
  pool: Pool,
  orderId: string,
): Promise<{ status: OrderStatus; paymentId: string | null; priceMinor: number; reason: string | null; deadlineAt: Date } | undefined> {
  const res = await pool.query(
    'SELECT status, payment_id AS "paymentId", price_minor::float8 AS "priceMinor", reason, deadline_at AS "deadlineAt" FROM orders WHERE id = $1',
    [orderId],
  );
  return res.rows[0];
}

/** Retries check every 100 ms until it resolves (its value is returned) or timeoutMs passed (its last error is thrown). */
export async function eventually<T>(check: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** Runs tasks with at most `limit` in flight (like an HTTP agent with `limit` connections); @returns results in task order */
export async function bounded<T>(limit: number, tasks: (() => Promise<T>)[]): Promise<T[]> {
  const results: T[] = new Array(tasks.length);
  let next = 0;
  const lane = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, lane));
  return results;
}

/**
 * Waits until the sale has `count` order workflows and none still runs (visibility catches up a moment after
 * each completion), then audits the sale against I1–I5 with the given Redis (the shared one by default).
 * @returns the audit's failed checks, [] when it passes
 */
export async function settledAudit(
  config: Config,
  clients: Clients,
  temporal: Client,
  saleId: number,
  accepted: readonly string[],
  timeoutMs = 90_000,
): Promise<string[]> {
  await until(
    `${accepted.length} workflows of sale ${saleId}, all closed`,
    async () => {
      const [all, running] = await Promise.all([
        temporal.workflow.count(`SaleId = ${saleId}`),
        temporal.workflow.count(`SaleId = ${saleId} AND ExecutionStatus = "Running"`),
      ]);
      return all.count >= accepted.length && running.count === 0;
    },
    timeoutMs,
  );
  const kafka = createKafka(config, `test-audit-${randomUUID()}`);
  const report = await auditSale({ pool: clients.pool, store: clients.store, temporal, kafka, topic: config.KAFKA_TOPIC }, saleId, accepted);
  return report.checks.filter((c) => !c.ok).map((c) => `${c.invariant} ${c.name}: ${JSON.stringify(c.figures)} e.g. ${c.examples?.join(', ')}`);
}


export { freePort, until };

/**
 * One HTTP request through node:http, for methods fetch will not send (TRACE) or does not know (QUERY), and for
 * conditional requests (fetch adds `Cache-Control: no-cache` to a request with If-None-Match, as its spec says).
 * @returns status, headers (lower-case names) and body text
 */
export function rawRequest(method: string, url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * The result of an order's workflow, once the starter has started it (an accepted order may wait in its start
 * queue for a moment; result() on an id Temporal does not know yet fails at once).
 */
export async function orderResult(temporal: Client, orderId: string): Promise<Order> {
  const handle = temporal.workflow.getHandle(orderId);
  await until(`the workflow of order ${orderId}`, () => handle.describe().then(() => true, () => false));
  return handle.result() as Promise<Order>;
}
