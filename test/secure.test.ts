/**
 * The service on the secured local stack (`scripts/services.sh up --secure`, which npm test runs): Redis on a
 * TLS port with an ACL user and the default user off, PostgreSQL with hostssl only (verify-full), Kafka's
 * SASL_SSL listener (SCRAM-SHA-512) and Temporal behind TLS that requires a client certificate. One whole order
 * runs through all four; then processes started with a wrong CA, a wrong password, a plaintext client or an
 * expired client certificate exit non-zero with a line naming the service and the cause, having written nothing.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Client } from '@temporalio/client';
import { Kafka, logLevel } from 'kafkajs';
import { startApi, type RunningApi } from '../src/api/main';
import { loadConfig } from '../src/config';
import { kafkaConnection } from '../src/infra/connections';
import { connectTemporal } from '../src/workflows/client';
import { buildWorkflowBundle } from '../src/worker/bundle';
import { startWorker, type RunningWorker } from '../src/worker/main';
import { prepareEnvironment } from './support/environment';
import { buyerToken, connectClients, createTestSale, NO_RATE_LIMITS, orderResult, orderRow, until, type Clients } from './support/helpers';
import { openEventTap, type EventTap } from './support/kafka';
import { secureEnv } from './support/secureStack';
import { installTestRuntime } from './support/temporalRuntime';

const ROOT = join(__dirname, '..');
const SECURE = join(ROOT, '.local', 'secure');
const env: NodeJS.ProcessEnv = {
  ...process.env,
  ...secureEnv(),
  LOG_LEVEL: 'silent',
  API_PORT: '0',
  INTERNAL_API_PORT: '0',
  TEMPORAL_TASK_QUEUE: `secure-${randomUUID()}`,
  SALE_GATE_REQUIRED: 'false',
  ...NO_RATE_LIMITS,
};
const config = loadConfig(env);
let clients: Clients;
let tap: EventTap;
let worker: RunningWorker;
let api: RunningApi;
let temporal: Client;

beforeAll(async () => {
  installTestRuntime();
  await prepareEnvironment(env);
  clients = connectClients(config);
  tap = await openEventTap(config);
  worker = await startWorker(config, await buildWorkflowBundle());
  api = await startApi(config);
  temporal = await connectTemporal(config);
}, 120_000);
afterAll(async () => {
  await Promise.allSettled([api?.close(), worker?.shutdown()]);
  await Promise.allSettled([temporal?.connection.close(), tap?.close(), clients?.close()]);
});

test('one whole order with every service on TLS and credentials: 202 → workflow → OrderPlaced → row → paid by the route → OrderPaid', async () => {
  // Each store is reached the secured way (the ports take nothing else): PostgreSQL says so of this session.
  const ssl = await clients.pool.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
  expect(ssl.rows[0].ssl).toBe(true);
  expect(await clients.redis.acl('WHOAMI')).toBe(config.REDIS_USERNAME);

  const sale = await createTestSale(clients, { quantities: [1], priceMinor: 4200 });
  const buyer = `secure-${randomUUID()}`;
  const token = await buyerToken(config, buyer);
  const purchase = await fetch(`${api.url}/api/flash-sales/items/${sale.items[0].itemId}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
  expect(purchase.status).toBe(202);
  const { orderId } = (await purchase.json()) as { orderId: string };

  const placed = await tap.collect([orderId], { until: (events) => events.some((e) => e.type === 'OrderPlaced'), timeoutMs: 60_000 });
  expect(placed.map((e) => e.type)).toContain('OrderPlaced');
  await until('the order row', async () => (await orderRow(clients.pool, orderId))?.status === 'PENDING', 30_000);

  const pay = await fetch(`${api.internalUrl}/api/flash-sales/orders/${orderId}/payment`, {
    method: 'POST',
    headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ paymentId: `secure-${orderId}`, amount: 4200 }),
  });
  expect(pay.status).toBe(200);
  const events = await tap.collect([orderId], { until: (all) => all.some((e) => e.type === 'OrderPaid'), timeoutMs: 60_000 });
  expect(events.map((e) => e.type)).toEqual(['OrderPlaced', 'OrderPaid']);
  await expect(orderResult(temporal, orderId)).resolves.toMatchObject({ status: 'PAID', paymentId: `secure-${orderId}` });
  expect(await orderRow(clients.pool, orderId)).toMatchObject({ status: 'PAID', paymentId: `secure-${orderId}` });
}, 120_000);

/** What the stores hold, to show that a refused start wrote nothing. */
async function snapshot(): Promise<Record<string, unknown>> {
  const admin = new Kafka({ clientId: `secure-snapshot-${randomUUID()}`, ...kafkaConnection(config), logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const [rows, keys, offsets, workflows] = await Promise.all([
      clients.pool.query('SELECT (SELECT count(*) FROM orders)::int AS orders, (SELECT count(*) FROM sale_events)::int AS sales').then((r) => r.rows[0]),
      // The reconciler of the suite's own API holds leases in the shards it passes over, which come and go.
      clients.redis.keys('*').then((keys) => keys.filter((key) => !/:(reconciler|fullpass)$/.test(key)).length),
      admin.fetchTopicOffsets(config.KAFKA_TOPIC).then((partitions) => partitions.map((p) => p.high)),
      temporal.workflow.count().then((c) => c.count),
    ]);
    return { rows, keys, offsets, workflows };
  } finally {
    await admin.disconnect();
  }
}

const file = (name: string) => join(SECURE, name);
const withoutPgPasswordFile = { PGPASSWORD_FILE: '', PGPASSWORD: 'not-the-password' };

/** [what is wrong, the process, variables over the secured settings, the line it must print] */
const REFUSALS: [string, 'api' | 'worker', Record<string, string>, RegExp][] = [
  ['Redis: a CA that did not sign its certificate', 'api', { REDIS_TLS_CA_FILE: file('other-ca.pem') }, /^api cannot start: redis: .*certificate/m],
  ['Redis: a wrong password', 'api', { REDIS_PASSWORD_FILE: '', REDIS_PASSWORD: 'not-the-password' }, /^api cannot start: redis: WRONGPASS/m],
  ['Redis: a plaintext client on its TLS port', 'api', { REDIS_TLS: 'false', REDIS_TLS_CA_FILE: '' }, /^api cannot start: redis: .*(ECONNRESET|closed)/m],
  ['PostgreSQL: a wrong password', 'api', withoutPgPasswordFile, /^api cannot start: postgres: password authentication failed for user "flash_sale"/m],
  ['PostgreSQL: a plaintext client (sslmode=disable)', 'api', { PGSSLMODE: 'disable', PGSSLROOTCERT: '' }, /^api cannot start: postgres: no pg_hba\.conf entry .*no encryption/m],
  ['PostgreSQL: a CA that did not sign its certificate', 'api', { PGSSLROOTCERT: file('other-ca.pem') }, /^api cannot start: postgres: .*certificate/m],
  ['Temporal: an expired client certificate', 'api', { TEMPORAL_TLS_CERT_FILE: file('expired-client.pem'), TEMPORAL_TLS_KEY_FILE: file('expired-client.key') }, /^api cannot start: temporal: .*\(TLS: .*certificate expired\)/m],
  ['Temporal: no client certificate', 'api', { TEMPORAL_TLS_CERT_FILE: '', TEMPORAL_TLS_KEY_FILE: '' }, /^api cannot start: temporal: .*\(TLS: .*certificate required\)/m],
  ['Temporal: a CA that did not sign its certificate', 'api', { TEMPORAL_TLS_CA_FILE: file('other-ca.pem') }, /^api cannot start: temporal: .*\(TLS: unable to verify the first certificate/m],
  ['Kafka: a wrong password', 'worker', { KAFKA_SASL_PASSWORD_FILE: '', KAFKA_SASL_PASSWORD: 'not-the-password' }, /^worker cannot start: kafka: .*SASL/m],
  ['Kafka: a CA that did not sign its certificate', 'worker', { KAFKA_TLS_CA_FILE: file('other-ca.pem') }, /^worker cannot start: kafka: .*unable to verify the first certificate/m],
];

test.each(REFUSALS)('%s: the %s exits 1 with a line naming the service and the cause, writing nothing', async (_what, role, overrides, line) => {
  const before = await snapshot();
  const childEnv: NodeJS.ProcessEnv = { ...env, LOG_LEVEL: 'error', ...overrides };
  for (const [name, value] of Object.entries(overrides)) if (value === '') delete childEnv[name];
  const run = await promisify(execFile)(process.execPath, [join(ROOT, 'dist', role, 'main.js')], { env: childEnv, timeout: 45_000 }).then(
    () => ({ code: 0, stderr: '' }),
    (err: { code?: number; stderr?: string; killed?: boolean }) => ({ code: err.killed ? 'timed out' : err.code, stderr: err.stderr ?? '' }),
  );
  expect(run.code).toBe(1);
  expect(run.stderr).toMatch(line);
  // No secret in what it printed.
  for (const secret of ['redis-password', 'pg-password', 'kafka-password']) expect(run.stderr).not.toContain(readFileSync(file(secret), 'utf8'));
  expect(await snapshot()).toEqual(before);
}, 60_000);
