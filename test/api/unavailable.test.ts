/**
 * Dependencies that fail (I4, I7): a workflow that cannot start turns into 503 SERVICE_UNAVAILABLE with
 * Retry-After and gives the unit back, unless Temporal cannot tell whether the start reached it (then the
 * reservation is left to the reconciler); Temporal cut off mid-run turns order reads and payments into 503,
 * and a Temporal that stops answering turns them into 503 within TEMPORAL_CALL_TIMEOUT_MS; an API that cannot
 * reach Redis at start fails instead of hanging; and a
 * private Redis (a redis-server this suite starts and kills, never the shared one) that dies mid-sale turns
 * purchases into 503 and /readyz into 503, then comes back empty and is rebuilt from PostgreSQL.
 * Every HTTP response is checked against openapi.yaml.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import type { Client } from '@temporalio/client';
import pino from 'pino';
import { startApi, type RunningApi } from '../../src/api/main';
import { saleKeys } from '../../src/reservations';
import { connectTemporal } from '../../src/temporal';
import { buildWorkflowBundle, startWorker, type RunningWorker } from '../../src/worker';
import { buyerToken, connectClients, eventually, createTestSale, recordWorkerThreads, testConfig, type Clients } from '../helpers';
import { http } from '../openapi';

const run = randomUUID().slice(0, 8);
const config = testConfig();

let clients: Clients;
let temporal: Client;
const accepted: string[] = [];
const toClose: (() => Promise<void>)[] = [];

beforeAll(async () => {
  clients = connectClients(config);
  temporal = await connectTemporal(config);
});

afterAll(async () => {
  for (const close of toClose.reverse()) await close().catch(() => undefined);
  await Promise.allSettled(accepted.map((id) => temporal.workflow.getHandle(id).terminate('unavailable suite finished')));
  await temporal?.connection.close();
  await clients?.close();
});

async function started(api: Promise<RunningApi>): Promise<RunningApi> {
  const running = await api;
  toClose.push(() => running.close());
  return running;
}

test('the workflow cannot start (unknown Temporal namespace) → 503 with Retry-After, the unit is released, /readyz says temporal down, and the buyer may buy again', async () => {
  // What actually fails: startApi connects fine (the connection is not namespace-scoped); StartWorkflowExecution
  // then answers NOT_FOUND "Namespace no-such-namespace is not found", and the purchase route releases the unit.
  const broken = await started(startApi(testConfig({ TEMPORAL_NAMESPACE: 'no-such-namespace' })));
  const healthy = await started(startApi(config));
  const sale = await createTestSale(clients, { quantities: [3] });
  const itemId = sale.items[0].itemId;
  const keys = saleKeys(sale.saleId);
  const buyer = `unstartable-${run}`;
  const token = await buyerToken(config, buyer);

  const reply = await http(broken.url)('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
  expect(reply.status).toBe(503);
  expect(reply.body).toEqual({ error: 'SERVICE_UNAVAILABLE' });
  expect(reply.headers.get('retry-after')).toBe('1');
  expect((await clients.store.stock(sale.saleId, [itemId])).get(itemId)).toBe(3);
  expect(await clients.redis.exists(keys.buyers, keys.reservations)).toBe(0);
  const metrics = await http(broken.url)('GET', '/metrics');
  expect(metrics.text).toMatch(/^flash_sale_reservations_total\{result="released_start_failed"\} 1$/m);
  expect(metrics.text).toMatch(/^flash_sale_purchase_outcomes_total\{code="SERVICE_UNAVAILABLE"\} 1$/m);

  // Readiness tells: the namespace the API needs does not answer.
  const notReady = await http(broken.url)('GET', '/readyz');
  expect(notReady.status).toBe(503);
  expect(notReady.body).toEqual({ error: 'SERVICE_UNAVAILABLE', checks: { redis: 'up', postgres: 'up', temporal: 'down' } });
  expect(notReady.headers.get('retry-after')).toBe('1');

  const retry = await http(healthy.url)('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
  expect(retry.status).toBe(202);
  accepted.push(retry.body.orderId as string);
  expect(await clients.redis.hgetall(keys.buyers)).toEqual({ [buyer]: retry.body.orderId });
  expect((await clients.store.stock(sale.saleId, [itemId])).get(itemId)).toBe(2);
});

test('the Temporal client thread is lost mid-sale → 503, the reservation stays for the reconciler (the start may have reached Temporal), the retry → 409 naming that order; the thread comes back', async () => {
  const { threads, restore } = recordWorkerThreads();
  try {
    const api = await started(startApi(config));
    const call = http(api.url);
    const sale = await createTestSale(clients, { quantities: [3] });
    const itemId = sale.items[0].itemId;
    const keys = saleKeys(sale.saleId);
    const buyer = `thread-lost-${run}`;
    const token = await buyerToken(config, buyer);

    await threads[0].terminate();
    const reply = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
    expect(reply.status).toBe(503);
    expect(reply.headers.get('retry-after')).toBe('1');
    const orderId = await clients.redis.hget(keys.buyers, buyer);
    expect(orderId).toEqual(expect.any(String));
    expect((await clients.store.stock(sale.saleId, [itemId])).get(itemId)).toBe(2);
    const retry = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
    expect(retry.status).toBe(409);
    expect(retry.body).toEqual({ error: 'ALREADY_PURCHASED', orderId });

    await eventually(async () => expect((await call('GET', '/readyz')).status).toBe(200), 15_000);
    expect(threads).toHaveLength(2);
    const other = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(config, `thread-back-${run}`) });
    expect(other.status).toBe(202);
    accepted.push(other.body.orderId as string);
  } finally {
    restore();
  }
});

test('Redis unreachable at start (closed port) → startApi rejects with ECONNREFUSED and leaves no client reconnecting', async () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  const log = pino({ level: 'warn' }, sink);
  await expect(startApi(testConfig({ REDIS_PORT: '1' }), log)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  const errorsAtFailure = lines.filter((l) => l.includes('redis error')).length;
  expect(errorsAtFailure).toBeGreaterThan(0);
  // ioredis retries after 50, 100, 150 … ms: a client left behind would log more errors within this wait.
  await new Promise((r) => setTimeout(r, 1500));
  expect(lines.filter((l) => l.includes('redis error')).length).toBe(errorsAtFailure);
});

describe('PostgreSQL reachable but failing (a listener that drops or stalls connections) → 503 with Retry-After, nothing changed', () => {
  test.each([
    ['connection closed as it opens', (socket: Socket) => socket.end()],
    ['connection reset as it opens', (socket: Socket) => socket.resetAndDestroy()],
    ['connection never answered (pool connect timeout, 5 s)', () => undefined],
  ])('%s', async (_name, onConnection) => {
    const stalled: Socket[] = [];
    const fake = createServer((socket) => {
      stalled.push(socket);
      onConnection(socket);
    }).listen(0, '127.0.0.1');
    await once(fake, 'listening');
    toClose.push(async () => {
      stalled.forEach((s) => s.destroy());
      await new Promise((r) => fake.close(r));
    });
    const api = await started(startApi(testConfig({ PGPORT: String((fake.address() as AddressInfo).port) })));
    // An item this API's catalog has not loaded yet, so the purchase needs PostgreSQL.
    const sale = await createTestSale(clients, { quantities: [2] });
    const itemId = sale.items[0].itemId;
    const before = await clients.store.stock(sale.saleId, [itemId]);
    const reply = await http(api.url)('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(config, `pg-${run}`) });
    expect([reply.status, reply.body.error, reply.headers.get('retry-after')]).toEqual([503, 'SERVICE_UNAVAILABLE', '1']);
    expect(await clients.store.stock(sale.saleId, [itemId])).toEqual(before);
    expect(await clients.redis.hlen(saleKeys(sale.saleId).reservations)).toBe(0);
  }, 20_000);
});

/**
 * A TCP relay to the shared Temporal that a test can cut (no new connections, open ones destroyed) or freeze
 * (connections stay open, bytes are held until thawed: a Temporal that stops answering).
 */
async function temporalRelay(): Promise<{ port: number; cut(): Promise<void>; freeze(): void; thaw(): void }> {
  const relayed: Socket[] = [];
  let frozen = false;
  const held: [Socket, Buffer][] = [];
  const forward = (from: Socket, to: Socket) =>
    from.on('data', (chunk: Buffer) => {
      if (frozen) held.push([to, chunk]);
      else to.write(chunk);
    });
  const relay = createServer((inbound) => {
    const outbound = connect(config.TEMPORAL_PORT, config.TEMPORAL_HOST);
    relayed.push(inbound, outbound);
    forward(inbound, outbound);
    forward(outbound, inbound);
    inbound.on('error', () => outbound.destroy()).on('close', () => outbound.destroy());
    outbound.on('error', () => inbound.destroy()).on('close', () => inbound.destroy());
  }).listen(0, '127.0.0.1');
  await once(relay, 'listening');
  const cut = async () => {
    const closed = new Promise((r) => relay.close(r));
    relayed.forEach((socket) => socket.destroy());
    await closed;
  };
  toClose.push(() => cut().catch(() => undefined));
  return {
    port: (relay.address() as AddressInfo).port,
    cut,
    freeze: () => void (frozen = true),
    thaw() {
      frozen = false;
      for (const [to, chunk] of held.splice(0)) if (!to.destroyed) to.write(chunk);
    },
  };
}

test('Temporal cut off while the API runs → GET order and payment answer 503 with Retry-After (not 500)', async () => {
  const relay = await temporalRelay();
  const api = await started(startApi(testConfig({ TEMPORAL_PORT: String(relay.port) })));
  await relay.cut();

  // A well-formed order id PostgreSQL does not know, so both routes must ask Temporal.
  const orderId = randomUUID();
  const [read, pay] = await Promise.all([
    http(api.url)('GET', `/api/flash-sales/orders/${orderId}`, { token: await buyerToken(config, `cut-${run}`) }),
    http(api.url)('POST', `/api/flash-sales/orders/${orderId}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `p-${run}`, amount: 100 } }),
  ]);
  expect([read.status, read.body.error, read.headers.get('retry-after')]).toEqual([503, 'SERVICE_UNAVAILABLE', '1']);
  expect([pay.status, pay.body.error, pay.headers.get('retry-after')]).toEqual([503, 'SERVICE_UNAVAILABLE', '1']);
}, 60_000);

test('Temporal stops answering (connection open, nothing comes back) → purchase, GET order and payment answer 503 within TEMPORAL_CALL_TIMEOUT_MS; the unclear start keeps its unit for the reconciler', async () => {
  const timeoutMs = 1500;
  const relay = await temporalRelay();
  const api = await started(startApi(testConfig({ TEMPORAL_PORT: String(relay.port), TEMPORAL_CALL_TIMEOUT_MS: String(timeoutMs) })));
  const call = http(api.url);
  const sale = await createTestSale(clients, { quantities: [2] });
  const itemId = sale.items[0].itemId;
  const buyer = `frozen-${run}`;
  const token = await buyerToken(config, buyer);
  relay.freeze();

  const startedAt = Date.now();
  const [purchase, read, pay] = await Promise.all([
    call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token }),
    call('GET', `/api/flash-sales/orders/${randomUUID()}`, { token }),
    call('POST', `/api/flash-sales/orders/${randomUUID()}/payment`, { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: `p-frozen-${run}`, amount: 100 } }),
  ]);
  const tookMs = Date.now() - startedAt;
  for (const reply of [purchase, read, pay]) {
    expect([reply.status, reply.body.error, reply.headers.get('retry-after')]).toEqual([503, 'SERVICE_UNAVAILABLE', '1']);
  }
  // The purchase waits for the start, then for the describe that asks whether it began: two deadlines.
  expect(tookMs).toBeLessThan(2 * timeoutMs + 3000);

  // The start may have reached Temporal: the unit stays reserved for its order, and the buyer's retry names it.
  const [orderId] = Object.keys(await clients.redis.hgetall(saleKeys(sale.saleId).reservations));
  expect(orderId).toBeDefined();
  accepted.push(orderId);
  expect(await clients.store.stock(sale.saleId, [itemId])).toEqual(new Map([[itemId, 1]]));
  relay.thaw();
  const retry = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token });
  expect([retry.status, retry.body]).toEqual([409, { error: 'ALREADY_PURCHASED', orderId }]);
}, 60_000);

describe('a private Redis dies mid-sale and comes back empty', () => {
  let port: number;
  let redisServer: ChildProcess | undefined;

  async function startRedis(): Promise<void> {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    redisServer = child;
    await eventually(async () => {
      await new Promise<void>((resolve, reject) => {
        const probe = createServer();
        probe.once('error', () => resolve()); // port taken: redis-server is listening
        probe.listen(port, '127.0.0.1', () => probe.close(() => reject(new Error('redis-server not listening yet'))));
      });
    }, 10_000);
  }

  async function stopRedis(): Promise<void> {
    const child = redisServer;
    redisServer = undefined;
    if (!child || child.exitCode !== null) return;
    child.kill('SIGKILL');
    await once(child, 'exit');
  }

  beforeAll(async () => {
    const probe = createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    port = (probe.address() as { port: number }).port;
    await new Promise((r) => probe.close(r));
    await startRedis();
    toClose.push(stopRedis);
  });

  test('purchases → 503 and /readyz → 503 (redis down) while it is gone; after a rebuild it sells again', async () => {
    const privateConfig = testConfig({ REDIS_PORT: String(port) });
    const privateClients = connectClients(privateConfig);
    privateClients.redis.on('error', () => undefined);
    toClose.push(() => privateClients.close());
    const worker: RunningWorker = await startWorker(privateConfig, await buildWorkflowBundle());
    toClose.push(() => worker.shutdown());
    const api = await started(startApi(privateConfig));
    const call = http(api.url);

    const sale = await createTestSale(privateClients, { quantities: [5] });
    const itemId = sale.items[0].itemId;
    const keys = saleKeys(sale.saleId);
    const purchase = async (buyer: string) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: await buyerToken(privateConfig, buyer) });
    const first = await purchase(`early-${run}`);
    expect(first.status).toBe(202);
    const firstId = first.body.orderId as string;
    accepted.push(firstId);
    await eventually(async () => {
      const { rows } = await privateClients.pool.query('SELECT id FROM orders WHERE sale_id = $1', [sale.saleId]);
      expect(rows).toEqual([{ id: firstId }]);
    });

    await stopRedis();
    const during = await purchase(`during-${run}`);
    expect(during.status).toBe(503);
    expect(during.body).toEqual({ error: 'SERVICE_UNAVAILABLE' });
    expect(during.headers.get('retry-after')).toBe('1');
    const notReady = await call('GET', '/readyz');
    expect(notReady.status).toBe(503);
    expect(notReady.body).toEqual({ error: 'SERVICE_UNAVAILABLE', checks: { redis: 'down', postgres: 'up', temporal: 'up' } });
    expect(notReady.headers.get('retry-after')).toBe('1');
    const { rows } = await privateClients.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders WHERE sale_id = $1', [sale.saleId]);
    expect(rows[0].n).toBe(1);

    // Back, but empty (no persistence, no script cache).
    await startRedis();
    await eventually(async () => expect((await call('GET', '/readyz')).status).toBe(200));
    const empty = await purchase(`after-${run}`);
    expect(empty.status).toBe(503);
    expect(empty.body).toEqual({ error: 'STOCK_NOT_LOADED' });

    const rebuilt = await call('POST', `/api/admin/sales/${sale.saleId}/stock?rebuild=true`, { token: privateConfig.ADMIN_TOKEN });
    expect(rebuilt.status).toBe(200);
    expect(rebuilt.body.items?.[0].stock).toBe(4);
    expect(await privateClients.redis.hgetall(keys.buyers)).toEqual({ [`early-${run}`]: firstId });
    const again = await purchase(`early-${run}`);
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: 'ALREADY_PURCHASED', orderId: firstId });
    const next = await purchase(`after-${run}`);
    expect(next.status).toBe(202);
    accepted.push(next.body.orderId as string);
    expect((await privateClients.store.stock(sale.saleId, [itemId])).get(itemId)).toBe(3);
  });
});
