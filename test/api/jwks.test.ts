/**
 * Buyer tokens verified against a JWKS endpoint (JWT_ALGORITHM=RS256, JWT_JWKS_URL), served here by a local
 * HTTP server this suite controls and counting its requests: a key found by `kid` admits the buyer, an unknown
 * `kid` is the token's fault (TOKEN_INVALID, 401), and a key server that fails or cannot be reached is not
 * (SERVICE_UNAVAILABLE, 503), a failure remembered for JWT_JWKS_REFETCH_COOLDOWN_MS only. A flood of random kids
 * reads the key set at most once per cooldown, and that read teaches every published kid. A foreign `iss` or
 * `aud`, or an `iat` older than JWT_MAX_AGE_S, is refused. Over HTTP (the real API, Redis, PostgreSQL and
 * Temporal), a failing key server is a 503 with Retry-After on the buyer routes.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { buyerAuthenticator, type Authentication } from '../../src/api/auth';
import { startApi } from '../../src/api/main';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/infra/logger';
import { testConfig } from '../support/helpers';
import { http } from '../support/openapi';

let server: Server;
let url: string;
/** What the JWKS endpoint answers next: the key set, or a failure status. */
let answer: { status: number; body: string };
let signingKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
let publicJwk: Record<string, unknown>;
/** Requests the JWKS endpoint has answered. */
let fetches = 0;

beforeAll(async () => {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  signingKey = privateKey;
  publicJwk = { ...(await exportJWK(publicKey)), alg: 'RS256', use: 'sig' };
  server = createServer((_req, res) => {
    fetches += 1;
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const serveKeys = (...kids: string[]) => {
  answer = { status: 200, body: JSON.stringify({ keys: kids.map((kid) => ({ ...publicJwk, kid })) }) };
};
/** An RS256 token of the suite's key, valid 1 h; `iat` now unless given (seconds since the epoch; null: none). */
const sign = (sub: string, kid: string, claims: { iss?: string; aud?: string; iat?: number | null } = {}) => {
  const jwt = new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid }).setSubject(sub).setExpirationTime('1h');
  if (claims.iat !== null) jwt.setIssuedAt(claims.iat);
  if (claims.iss) jwt.setIssuer(claims.iss);
  if (claims.aud) jwt.setAudience(claims.aud);
  return jwt.sign(signingKey);
};
const authenticatorFor = (jwksUrl: string, env: Record<string, string> = {}) =>
  buyerAuthenticator(
    loadConfig({ NODE_ENV: 'test', JWT_ALGORITHM: 'RS256', JWT_JWKS_URL: jwksUrl, ...env }),
    createLogger('silent', 'test'),
  );
/** A cooldown short enough to wait out, long enough to outlast a loaded machine's fetch. */
const SHORT_COOLDOWN_MS = 1_000;
/** How many answers of each kind (a buyer id or an error code). */
const tally = (answers: Authentication[]) => {
  const counts: Record<string, number> = {};
  for (const answer of answers) {
    const kind = 'error' in answer ? answer.error : answer.buyerId;
    counts[kind] = (counts[kind] ?? 0) + 1;
  }
  return counts;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A token of an attacker: a random kid, a made-up signature. */
const randomKidToken = () => {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const kid = `x-${Math.random().toString(36).slice(2)}`;
  return `${part({ alg: 'RS256', kid })}.${part({ sub: 'mallory', exp: Math.floor(Date.now() / 1000) + 3600, iat: Math.floor(Date.now() / 1000) })}.${'A'.repeat(342)}`;
};

test('a key found by kid admits the buyer; an unknown kid → TOKEN_INVALID', async () => {
  serveKeys('k1');
  const authenticate = authenticatorFor(url);
  expect(await authenticate(`Bearer ${await sign('alice', 'k1')}`)).toEqual({ buyerId: 'alice' });
  expect(await authenticate(`Bearer ${await sign('mallory', 'no-such-kid')}`)).toEqual({ error: 'TOKEN_INVALID' });
});

test.each([
  ['answers 500', { status: 500, body: '{"error":"boom"}' }],
  ['answers 503 with a body that is not JSON', { status: 503, body: '<html>down</html>' }],
  ['answers an empty key set', { status: 200, body: '{"keys":[]}' }],
])('the JWKS endpoint %s → SERVICE_UNAVAILABLE, remembered for the cooldown only: then the same token is admitted', async (_name, failure) => {
  const kid = `k-${Math.random().toString(36).slice(2)}`;
  const token = `Bearer ${await sign('bob', kid)}`;
  const authenticate = authenticatorFor(url, { JWT_JWKS_REFETCH_COOLDOWN_MS: String(SHORT_COOLDOWN_MS) });
  answer = failure;
  fetches = 0;
  expect(await authenticate(token)).toEqual({ error: 'SERVICE_UNAVAILABLE' });
  serveKeys(kid);
  expect(await authenticate(token)).toEqual({ error: 'SERVICE_UNAVAILABLE' });
  expect(fetches).toBe(1);
  await sleep(SHORT_COOLDOWN_MS);
  expect(await authenticate(token)).toEqual({ buyerId: 'bob' });
});

test('the JWKS endpoint cannot be reached → SERVICE_UNAVAILABLE', async () => {
  const closed = createServer().listen(0, '127.0.0.1');
  await once(closed, 'listening');
  const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/jwks.json`;
  await new Promise((resolve) => closed.close(resolve));
  expect(await authenticatorFor(deadUrl)(`Bearer ${await sign('carol', 'k1')}`)).toEqual({ error: 'SERVICE_UNAVAILABLE' });
});

test('1,000 tokens with random kids are refused with at most one read of the key set; a known kid still admits', async () => {
  serveKeys('k1');
  const authenticate = authenticatorFor(url);
  fetches = 0;
  expect(await authenticate(`Bearer ${await sign('alice', 'k1')}`)).toEqual({ buyerId: 'alice' });
  const known = fetches; // the set read, then k1's key through get-jwks
  const flood = Array.from({ length: 1_000 }, () => authenticate(`Bearer ${randomKidToken()}`));
  expect(tally(await Promise.all(flood))).toEqual({ TOKEN_INVALID: 1_000 });
  for (let i = 0; i < 100; i++) expect(await authenticate(`Bearer ${randomKidToken()}`)).toEqual({ error: 'TOKEN_INVALID' });
  expect(fetches - known).toBe(0);
  expect(fetches).toBeLessThanOrEqual(3);
  expect(await authenticate(`Bearer ${await sign('bob', 'k1')}`)).toEqual({ buyerId: 'bob' });
});

test('a flood of random kids on a new process reads the set once, and that read teaches every published kid', async () => {
  serveKeys('k1', 'k2');
  const authenticate = authenticatorFor(url);
  fetches = 0;
  const flood = Array.from({ length: 1_000 }, () => authenticate(`Bearer ${randomKidToken()}`));
  expect(tally(await Promise.all(flood))).toEqual({ TOKEN_INVALID: 1_000 });
  expect(fetches).toBe(1);
  // Within the cooldown, kids the flood's read listed are admitted: the flood starves no real key.
  expect(await authenticate(`Bearer ${await sign('carol', 'k2')}`)).toEqual({ buyerId: 'carol' });
  expect(await authenticate(`Bearer ${await sign('dave', 'k1')}`)).toEqual({ buyerId: 'dave' });
  expect(fetches).toBeLessThanOrEqual(3);
});

test('once the cooldown has passed, an unknown kid reads the set again: a key published since admits', async () => {
  serveKeys('k1');
  const authenticate = authenticatorFor(url, { JWT_JWKS_REFETCH_COOLDOWN_MS: String(SHORT_COOLDOWN_MS) });
  const token = `Bearer ${await sign('erin', 'k-new')}`;
  expect(await authenticate(token)).toEqual({ error: 'TOKEN_INVALID' });
  serveKeys('k1', 'k-new');
  expect(await authenticate(token)).toEqual({ error: 'TOKEN_INVALID' });
  await sleep(SHORT_COOLDOWN_MS);
  expect(await authenticate(token)).toEqual({ buyerId: 'erin' });
});

test('with JWT_ISSUER and JWT_AUDIENCE, a token of a foreign issuer or for a foreign audience → TOKEN_INVALID', async () => {
  serveKeys('k1');
  const authenticate = authenticatorFor(url, { JWT_ISSUER: 'https://id.example', JWT_AUDIENCE: 'flash-sale' });
  const ours = { iss: 'https://id.example', aud: 'flash-sale' };
  expect(await authenticate(`Bearer ${await sign('alice', 'k1', ours)}`)).toEqual({ buyerId: 'alice' });
  for (const claims of [
    { ...ours, aud: 'another-app' },
    { ...ours, iss: 'https://other-tenant.example' },
    { iss: ours.iss },
    { aud: ours.aud },
  ]) {
    expect([claims, await authenticate(`Bearer ${await sign('mallory', 'k1', claims)}`)]).toEqual([claims, { error: 'TOKEN_INVALID' }]);
  }
});

test('with JWT_MAX_AGE_S, a token issued longer ago → TOKEN_EXPIRED, one without iat → TOKEN_INVALID, a fresh one admitted', async () => {
  serveKeys('k1');
  const authenticate = authenticatorFor(url, { JWT_MAX_AGE_S: '600' });
  const nowS = Math.floor(Date.now() / 1000);
  expect(await authenticate(`Bearer ${await sign('fresh', 'k1')}`)).toEqual({ buyerId: 'fresh' });
  expect(await authenticate(`Bearer ${await sign('recent', 'k1', { iat: nowS - 590 })}`)).toEqual({ buyerId: 'recent' });
  expect(await authenticate(`Bearer ${await sign('old', 'k1', { iat: nowS - 610 })}`)).toEqual({ error: 'TOKEN_EXPIRED' });
  expect(await authenticate(`Bearer ${await sign('ageless', 'k1', { iat: null })}`)).toEqual({ error: 'TOKEN_INVALID' });
});

test('over HTTP, a JWKS endpoint that fails → purchase and GET order answer 503 with Retry-After, no 401 challenge', async () => {
  answer = { status: 500, body: '{}' };
  const api = await startApi(testConfig({ JWT_ALGORITHM: 'RS256', JWT_JWKS_URL: url }));
  try {
    const token = await sign('dave', 'k-http');
    const call = http(api.url);
    for (const [method, path] of [
      ['POST', '/api/flash-sales/items/1/purchase'],
      ['GET', '/api/flash-sales/orders/00000000-0000-4000-8000-000000000000'],
    ] as const) {
      const reply = await call(method, path, { token });
      expect([method, reply.status, reply.body, reply.headers.get('retry-after'), reply.headers.get('www-authenticate')]).toEqual([
        method,
        503,
        { error: 'SERVICE_UNAVAILABLE' },
        '1',
        null,
      ]);
    }
  } finally {
    await api.close();
  }
});
