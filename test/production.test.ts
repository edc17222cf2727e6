/**
 * Safe as shipped (docs/design.md): without NODE_ENV the service is in production, refuses the development
 * secrets and mounts no development route; the public door serves buyers only, the internal door the rest, its
 * failed credentials limited and counted; the client address is the one the trusted proxy appended; a slow client
 * is cut off at the header timeout. Production needs real credentials, so the API runs on the secured copy of the
 * stack (scripts/services.sh up --secure, which npm test runs).
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SignJWT } from 'jose';
import { startApi, type RunningApi } from '../src/api/main';
import { ConfigError, loadConfig, type Config } from '../src/config';
import { startChild, type Child } from './support/processes';
import { prepareEnvironment, TEST_ENVIRONMENT } from './support/environment';
import { freePort } from './support/helpers';
import { secureEnv } from './support/secureStack';

const ROOT = join(__dirname, '..');
const ISSUER = 'https://id.flash-sale.test/';
const AUDIENCE = 'flash-sale-buyers';
const HEADERS_TIMEOUT_MS = 2000;

const secret = () => randomBytes(32).toString('hex');
/** A production deployment's settings on the secured stack: real secrets, issuer and audience, one proxy in front. */
const production: Record<string, string> = {
  ...secureEnv(),
  ...TEST_ENVIRONMENT,
  PATH: process.env.PATH ?? '',
  JWT_SECRET: secret(),
  ADMIN_TOKEN: secret(),
  PAYMENT_SERVICE_TOKEN: secret(),
  SALE_GATE_SECRET: secret(),
  JWT_ISSUER: ISSUER,
  JWT_AUDIENCE: AUDIENCE,
  TRUST_PROXY: '1',
  STARTER_IN_API: 'false',
  TEMPORAL_TASK_QUEUE: `production-${randomUUID()}`,
};
const inProcess: Record<string, string> = { ...production, NODE_ENV: 'production', LOG_LEVEL: 'silent', API_PORT: '0', INTERNAL_API_PORT: '0', RATE_LIMIT_WINDOW_S: '60', HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS) };

let config: Config;
let api: RunningApi;
const children: Child[] = [];

beforeAll(async () => {
  await prepareEnvironment(inProcess);
  config = loadConfig(inProcess, 'api');
  api = await startApi(config);
}, 120_000);
afterAll(async () => {
  await Promise.allSettled(children.map((c) => c.stop()));
  await api?.close();
});

function buyerToken(sub: string): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(sub)
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(config.JWT_SECRET));
}

/** One request; `client` is the address our (pretend) proxy appended to X-Forwarded-For, after `forged`. */
async function call(base: string, method: string, path: string, options: { token?: string; client?: string; forged?: string; json?: unknown } = {}) {
  const forwarded = [options.forged, options.client].filter(Boolean).join(', ');
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(options.token && { authorization: `Bearer ${options.token}` }),
      ...(forwarded && { 'x-forwarded-for': forwarded }),
      ...(options.json !== undefined && { 'content-type': 'application/json' }),
    },
    body: options.json === undefined ? undefined : JSON.stringify(options.json),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // /metrics is text
  }
  return { status: res.status, headers: res.headers, body, text };
}

const run = promisify(execFile);

test('the compiled API with only the stores’ addresses (no NODE_ENV) refuses to start, naming each development secret', async () => {
  const env = { PATH: process.env.PATH ?? '', PGHOST: '127.0.0.1', REDIS_HOST: '127.0.0.1', KAFKA_HOST: '127.0.0.1', TEMPORAL_HOST: '127.0.0.1', API_PORT: String(await freePort()) };
  const failed = await run(process.execPath, [join(ROOT, 'dist', 'api', 'main.js')], { env, timeout: 30_000 }).then(
    () => undefined,
    (err: { code?: number; stderr?: string }) => err,
  );
  expect(failed?.code).toBe(1);
  for (const name of ['JWT_SECRET', 'ADMIN_TOKEN', 'PAYMENT_SERVICE_TOKEN', 'SALE_GATE_SECRET', 'PGPASSWORD', 'TRUST_PROXY', 'JWT_ISSUER', 'JWT_AUDIENCE']) {
    expect(failed?.stderr).toMatch(new RegExp(`^  ${name}: `, 'm'));
  }
});

test('given real secrets, the compiled API (no NODE_ENV) starts and serves no development route on either door', async () => {
  const [port, internalPort] = [await freePort(), await freePort()];
  const child = startChild('api', 'dist/api/main.js', { ...production, LOG_LEVEL: 'info', API_PORT: String(port), INTERNAL_API_PORT: String(internalPort) }, join(ROOT, 'reports', 'test', 'production-api.log'), 'api listening');
  children.push(child);
  await child.ready;
  for (const base of [`http://127.0.0.1:${port}`, `http://127.0.0.1:${internalPort}`]) {
    expect(await call(base, 'POST', '/api/dev/token', { json: { buyerId: 'victim' } })).toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
    expect(await call(base, 'POST', `/api/dev/orders/${randomUUID()}/payment`, { token: await buyerToken('victim') })).toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
  }
  const contract = (await call(`http://127.0.0.1:${port}`, 'GET', '/openapi.json')).body as { paths: Record<string, unknown> };
  expect(Object.keys(contract.paths).filter((path) => /^\/api\/(admin|dev)\/|\/payment$|^\/(metrics|readyz)$/.test(path))).toEqual([]);
  expect(Object.keys(contract.paths)).toContain('/api/flash-sales/items/{itemId}/purchase');
});

test('TRUST_PROXY unsaid in production is refused, in one line naming it', () => {
  const env = Object.fromEntries(Object.entries(inProcess).filter(([name]) => name !== 'TRUST_PROXY'));
  let error: unknown;
  try {
    loadConfig(env, 'api');
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(ConfigError);
  expect((error as Error).message.split('\n')).toEqual(['Invalid configuration:', expect.stringMatching(/^ {2}TRUST_PROXY: must be said in production/)]);
});

test('the public door answers 404 for every admin, payment, metrics, readiness and development path; the internal door serves them', async () => {
  const order = randomUUID();
  const internalPaths: [string, string, string | undefined][] = [
    ['POST', `/api/flash-sales/orders/${order}/payment`, config.PAYMENT_SERVICE_TOKEN],
    ['POST', '/api/admin/sales', config.ADMIN_TOKEN],
    ['GET', '/api/admin/sales/2147483647', config.ADMIN_TOKEN],
    ['POST', '/api/admin/sales/2147483647/stock', config.ADMIN_TOKEN],
    ['GET', '/metrics', undefined],
    ['GET', '/readyz', undefined],
  ];
  for (const [method, path, token] of [...internalPaths, ['POST', '/api/dev/token', undefined] as const, ['POST', `/api/dev/orders/${order}/payment`, undefined] as const]) {
    expect({ path, ...(await call(api.url, method, path, { token, json: method === 'POST' ? {} : undefined })) }).toMatchObject({ path, status: 404, body: { error: 'NOT_FOUND' } });
  }
  expect(await call(api.internalUrl, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  expect((await call(api.internalUrl, 'GET', '/metrics')).text).toMatch(/^# TYPE flash_sale_credential_failures_total counter$/m);
  expect(await call(api.internalUrl, 'GET', '/api/admin/sales/2147483647', { token: config.ADMIN_TOKEN })).toMatchObject({ status: 404, body: { error: 'SALE_NOT_FOUND' } });
  expect(await call(api.internalUrl, 'POST', '/api/flash-sales/orders/not-an-order/payment', { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: 'p', amount: 1 } })).toMatchObject({ status: 404, body: { error: 'ORDER_NOT_FOUND' } });
  // Buyers keep theirs on the public door only.
  expect(await call(api.internalUrl, 'GET', `/api/flash-sales/orders/${order}`, { token: await buyerToken('alice') })).toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
});

/** @returns the value of one series of a counter in the internal door's /metrics, 0 when absent */
async function counter(series: string): Promise<number> {
  const line = (await call(api.internalUrl, 'GET', '/metrics')).text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

test('50 wrong payment tokens in a row from one client: limited after INTERNAL_AUTH_FAILURES_PER_MIN, each counted; another client is served', async () => {
  const forbidden = 'flash_sale_credential_failures_total{credential="payment",code="FORBIDDEN"}';
  const limited = 'flash_sale_credential_failures_total{credential="payment",code="RATE_LIMITED"}';
  const before = [await counter(forbidden), await counter(limited)];
  const guesser = '198.51.100.7';
  const answers = [];
  for (let i = 0; i < 50; i++) {
    const reply = await call(api.internalUrl, 'POST', `/api/flash-sales/orders/${randomUUID()}/payment`, { token: `guess-${i}-${secret()}`, client: guesser, json: { paymentId: `p-${i}`, amount: 1 } });
    answers.push(reply.status);
    if (reply.status === 429) expect(Number(reply.headers.get('retry-after'))).toBeGreaterThan(0);
  }
  const limit = config.INTERNAL_AUTH_FAILURES_PER_MIN;
  expect(answers).toEqual([...Array<number>(limit).fill(403), ...Array<number>(50 - limit).fill(429)]);
  expect([(await counter(forbidden)) - before[0], (await counter(limited)) - before[1]]).toEqual([limit, 50 - limit]);
  // Even the right token waits out the block: the guesser cannot tell a hit from a miss meanwhile.
  const right = { token: config.PAYMENT_SERVICE_TOKEN, json: { paymentId: 'p', amount: 1 } };
  expect((await call(api.internalUrl, 'POST', '/api/flash-sales/orders/not-an-order/payment', { ...right, client: guesser })).status).toBe(429);
  expect(await call(api.internalUrl, 'POST', '/api/flash-sales/orders/not-an-order/payment', { ...right, client: '198.51.100.8' })).toMatchObject({ status: 404, body: { error: 'ORDER_NOT_FOUND' } });
});

test('TRUST_PROXY=1: 300 tokenless presses from one client, whatever X-Forwarded-For it forges, spend only its own budget; a real buyer is not 429', async () => {
  const attacker = '203.0.113.9';
  const statuses = new Map<number, number>();
  for (let i = 0; i < 300; i++) {
    const forged = `10.${i % 250}.${(i * 7) % 250}.${(i * 13) % 250}`;
    const { status } = await call(api.url, 'POST', '/api/flash-sales/items/2147483647/purchase', { client: attacker, forged });
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  expect(Object.fromEntries(statuses)).toEqual({ 401: config.RATE_LIMIT_PER_IP, 429: 300 - config.RATE_LIMIT_PER_IP });
  // Past the limit (429), an unknown item: the buyer got through both limits and the token check.
  const buyer = await call(api.url, 'POST', '/api/flash-sales/items/2147483647/purchase', { client: '203.0.113.10', forged: attacker, token: await buyerToken(`buyer-${randomUUID()}`) });
  expect(buyer).toMatchObject({ status: 404, body: { error: 'ITEM_NOT_FOUND' } });
});

test('a token for another audience or issuer is refused in production', async () => {
  const key = new TextEncoder().encode(config.JWT_SECRET);
  const sign = (issuer: string, audience: string) => new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('mallory').setIssuer(issuer).setAudience(audience).setIssuedAt().setExpirationTime('1h').sign(key);
  for (const token of [await sign(ISSUER, 'another-app'), await sign('https://other-tenant.test/', AUDIENCE)]) {
    expect(await call(api.url, 'GET', `/api/flash-sales/orders/${randomUUID()}`, { token, client: '203.0.113.20' })).toMatchObject({ status: 401, body: { error: 'TOKEN_INVALID' } });
  }
});

test('a client that sends its headers a byte a second is cut off with 408 at the header timeout', async () => {
  const port = Number(new URL(api.url).port);
  const socket = connect(port, '127.0.0.1');
  const startedAt = performance.now();
  let received = '';
  socket.on('data', (chunk) => (received += chunk.toString()));
  socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
  const drip = setInterval(() => socket.writable && socket.write('a'), 1000);
  await new Promise((resolve) => socket.once('close', resolve));
  clearInterval(drip);
  const elapsedMs = performance.now() - startedAt;
  expect(received).toMatch(/^HTTP\/1\.1 408 /);
  expect(received).toContain('"error":"REQUEST_TIMEOUT"');
  // Node checks the timeout once a second (connectionsCheckingInterval): cut within that of the limit.
  expect(elapsedMs).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 50);
  expect(elapsedMs).toBeLessThan(HEADERS_TIMEOUT_MS + 2500);
}, 15_000);
