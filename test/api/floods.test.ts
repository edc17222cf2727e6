/**
 * Floods of public and operator reads against the real API and stores (issue 45): the sale view answers from each
 * process's cache (src/api/saleViews.ts), so that 20,000 reads with random query strings cost PostgreSQL nothing
 * beyond the cache's own reads while payments sent meanwhile keep their latency, and random sale ids cost no
 * query each; /readyz and /metrics answer from a timer's reading (src/api/polled.ts).
 * The API runs in this process with its PostgreSQL pool's queries noted as they are sent; the flood comes from
 * autocannon in a child process, so that it does not share the API's event loop.
 */
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import type { Pool } from 'pg';
import { startApi, type RunningApi } from '../../src/api/main';
import * as db from '../../src/infra/db';
import { latencySummary } from '../support/stats';
import { bounded, buyerToken, connectClients, createTestSale, testConfig, type Clients } from '../support/helpers';

const PRICE = 1999;
const FLOOD_READS = 20_000;
const FLOOD_CONNECTIONS = 32;
const BASELINE_PAYMENTS = 200;
/** Payments at most while the flood runs (they go one at a time until it ends). */
const FLOOD_PAYMENTS = 800;

const config = testConfig({
  // No starter: between requests the API sends no query of its own (its orders are paid from their reservations).
  STARTER_IN_API: 'false',
  // Untraced: a traced payment reads its order's traceparent too (one statement more).
  OTEL_TRACES_EXPORTER: 'none',
  // The buyer's limit as deployed; the others high enough that every read reaches the cache.
  RATE_LIMIT_PER_BUYER: '10',
  RATE_LIMIT_PER_IP: '1000000000',
  RATE_LIMIT_READS_PER_IP: '1000000000',
});

/** Every statement the API's pool was sent, in order. */
const sent: string[] = [];
let api: RunningApi;
let clients: Clients;

beforeAll(async () => {
  clients = connectClients(config);
  const createPool = db.createPool;
  const spy = jest.spyOn(db, 'createPool').mockImplementation((...args) => {
    const pool = createPool(...args);
    const query = pool.query.bind(pool) as (...a: unknown[]) => unknown;
    pool.query = ((...a: unknown[]) => {
      sent.push(typeof a[0] === 'string' ? a[0] : (a[0] as { text: string }).text);
      return query(...a);
    }) as Pool['query'];
    return pool;
  });
  try {
    api = await startApi(config);
  } finally {
    spy.mockRestore();
  }
});

afterAll(async () => {
  await api?.close();
  await clients?.close();
});

/** @returns what fn returned, the statements the API's pool was sent meanwhile, and how long it took (ms) */
async function counted<T>(fn: () => Promise<T>): Promise<{ result: T; statements: string[]; ms: number }> {
  const from = sent.length;
  const startedAt = performance.now();
  const result = await fn();
  return { result, statements: sent.slice(from), ms: performance.now() - startedAt };
}

/** Statements by their first line, with their count: what a failed bound prints. */
function byStatement(statements: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of statements) {
    const head = s.trim().split('\n')[0].slice(0, 80);
    out[head] = (out[head] ?? 0) + 1;
  }
  return out;
}

/** GETs a URL of the API; @returns its status (the body read and dropped) */
async function get(url: string): Promise<number> {
  const res = await fetch(url);
  await res.arrayBuffer();
  return res.status;
}

/** Pays an order its price on the internal door; @returns the status and the latency (ms) */
async function pay(orderId: string): Promise<{ status: number; ms: number }> {
  const startedAt = performance.now();
  const res = await fetch(`${api.internalUrl}/api/flash-sales/orders/${orderId}/payment`, {
    method: 'POST',
    headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ paymentId: `flood-${orderId}`, amount: PRICE }),
  });
  await res.arrayBuffer();
  return { status: res.status, ms: performance.now() - startedAt };
}

interface FloodResult {
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
}

/** autocannon in a child process: `amount` GETs of url, each with its own `[<id>]` replaced by a unique id. */
function flood(url: string, amount: number): Promise<FloodResult> {
  const script = `require('autocannon')(JSON.parse(process.argv[1]), (err, r) => {
    if (err) throw err;
    process.stdout.write(JSON.stringify({ ok: r['2xx'], non2xx: r.non2xx, errors: r.errors, timeouts: r.timeouts }));
  });`;
  const options = { url, amount, connections: FLOOD_CONNECTIONS, idReplacement: true };
  const child = spawn(process.execPath, ['-e', script, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as FloodResult) : reject(new Error(`autocannon exited with ${code}`))));
  });
}

test(`${FLOOD_READS} sale-view reads with random query strings: no PostgreSQL query beyond the cache's, payments meanwhile all 200 (latency printed)`, async () => {
  const sale = await createTestSale(clients, { quantities: [BASELINE_PAYMENTS + FLOOD_PAYMENTS], priceMinor: PRICE });
  const itemId = sale.items[0].itemId;
  const orderIds = await bounded(
    16,
    Array.from({ length: BASELINE_PAYMENTS + FLOOD_PAYMENTS }, (_, i) => async () => {
      const res = await fetch(`${api.url}/api/flash-sales/items/${itemId}/purchase`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await buyerToken(config, `flood-${sale.saleId}-${i}`)}` },
      });
      expect(res.status).toBe(202);
      return ((await res.json()) as { orderId: string }).orderId;
    }),
  );
  const view = `${api.url}/api/flash-sales/sales/${sale.saleId}`;
  expect(await get(`${view}?cb=first`)).toBe(200);

  const baseline: number[] = [];
  for (const orderId of orderIds.slice(0, BASELINE_PAYMENTS)) {
    const { status, ms } = await pay(orderId);
    expect(status).toBe(200);
    baseline.push(ms);
  }

  const duringFlood: number[] = [];
  const { result: reads, statements, ms } = await counted(async () => {
    let done = false;
    const reading = flood(`${view}?cb=[<id>]`, FLOOD_READS).finally(() => (done = true));
    for (const orderId of orderIds.slice(BASELINE_PAYMENTS)) {
      if (done) break;
      const { status, ms: latency } = await pay(orderId);
      expect(status).toBe(200);
      duringFlood.push(latency);
    }
    return reading;
  });
  // Each payment is one statement of its own (Orders.pay); everything else is the view's.
  const payments = statements.filter((s) => s.includes('INSERT INTO payments'));
  const others = statements.filter((s) => !s.includes('INSERT INTO payments'));
  const figures = {
    reads,
    floodS: Math.round(ms) / 1000,
    readsPerS: Math.round(reads.ok / (ms / 1000)),
    viewStatements: byStatement(others),
    paymentsAloneMs: latencySummary(baseline),
    paymentsDuringFloodMs: latencySummary(duringFlood),
  };
  console.log(`floods: sale view × ${FLOOD_READS} (${FLOOD_CONNECTIONS} connections, random ?cb=) ${JSON.stringify(figures)}`);

  expect(reads).toEqual({ ok: FLOOD_READS, non2xx: 0, errors: 0, timeouts: 0 });
  expect(payments).toHaveLength(duringFlood.length);
  // The cache reads a sale at most once a second; this one was read before the flood.
  expect(others.length).toBeLessThanOrEqual(Math.ceil(ms / 1000));
  // Payments went on through the flood; the bound only says none waited out a pool or a request timeout.
  expect(duringFlood.length).toBeGreaterThan(0);
  expect(Math.max(...duringFlood)).toBeLessThan(2000);
}, 180_000);

test('2,000 reads of random sale ids above any sale: 404 SALE_NOT_FOUND, a query at most every 100 ms, not one each', async () => {
  const { result: statuses, statements, ms } = await counted(() =>
    bounded(
      32,
      Array.from({ length: 2000 }, () => () => get(`${api.url}/api/flash-sales/sales/${randomInt(2 ** 30, 2 ** 31 - 1)}`)),
    ),
  );
  console.log(`floods: 2,000 random sale ids in ${Math.round(ms)} ms: ${statements.length} statements ${JSON.stringify(byStatement(statements))}`);
  expect(new Set(statuses)).toEqual(new Set([404]));
  expect(statements.length).toBeLessThanOrEqual(Math.ceil(ms / 100) + 1);
});

test('500 /readyz and 500 /metrics: answered from the last check, a PostgreSQL check at most once a second', async () => {
  const { result: statuses, statements, ms } = await counted(() =>
    bounded(
      16,
      Array.from({ length: 1000 }, (_, i) => () => get(`${api.internalUrl}/${i % 2 ? 'metrics' : 'readyz'}`)),
    ),
  );
  console.log(`floods: 500 /readyz + 500 /metrics in ${Math.round(ms)} ms: ${statements.length} statements ${JSON.stringify(byStatement(statements))}`);
  expect(new Set(statuses)).toEqual(new Set([200]));
  // The first request takes the first check; then one a second, each after the previous ended.
  expect(statements.length).toBeLessThanOrEqual(Math.ceil(ms / 1000) + 1);
});
