/**
 * Buyer tokens verified against a JWKS endpoint (JWT_ALGORITHM=RS256, JWT_JWKS_URL), served here by a local
 * HTTP server this suite controls: a key found by `kid` admits the buyer, an unknown `kid` is the token's fault
 * (TOKEN_INVALID, 401), and a key server that fails or cannot be reached is not (SERVICE_UNAVAILABLE, 503),
 * nor is that failure remembered. Over HTTP (the real API, Redis, PostgreSQL and Temporal), that failure is a
 * 503 with Retry-After on the buyer routes.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { buyerAuthenticator } from '../../src/api/auth';
import { startApi } from '../../src/api/main';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { testConfig } from '../helpers';
import { http } from '../openapi';

let server: Server;
let url: string;
/** What the JWKS endpoint answers next: the key set, or a failure status. */
let answer: { status: number; body: string };
let signingKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
let publicJwk: Record<string, unknown>;

beforeAll(async () => {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  signingKey = privateKey;
  publicJwk = { ...(await exportJWK(publicKey)), alg: 'RS256', use: 'sig' };
  server = createServer((_req, res) => res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const serveKeys = (...kids: string[]) => {
  answer = { status: 200, body: JSON.stringify({ keys: kids.map((kid) => ({ ...publicJwk, kid })) }) };
};
const sign = (sub: string, kid: string) =>
  new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid }).setSubject(sub).setExpirationTime('1h').sign(signingKey);
const authenticatorFor = (jwksUrl: string) =>
  buyerAuthenticator(loadConfig({ JWT_ALGORITHM: 'RS256', JWT_JWKS_URL: jwksUrl }), createLogger('silent', 'test'));

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
])('the JWKS endpoint %s → SERVICE_UNAVAILABLE, not remembered: once it serves the key, the same token is admitted', async (_name, failure) => {
  const kid = `k-${Math.random().toString(36).slice(2)}`;
  const token = `Bearer ${await sign('bob', kid)}`;
  const authenticate = authenticatorFor(url);
  answer = failure;
  expect(await authenticate(token)).toEqual({ error: 'SERVICE_UNAVAILABLE' });
  serveKeys(kid);
  expect(await authenticate(token)).toEqual({ buyerId: 'bob' });
});

test('the JWKS endpoint cannot be reached → SERVICE_UNAVAILABLE', async () => {
  const closed = createServer().listen(0, '127.0.0.1');
  await once(closed, 'listening');
  const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/jwks.json`;
  await new Promise((resolve) => closed.close(resolve));
  expect(await authenticatorFor(deadUrl)(`Bearer ${await sign('carol', 'k1')}`)).toEqual({ error: 'SERVICE_UNAVAILABLE' });
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
