/**
 * Unit tests of the buyer authenticator's memory of verified tokens (pure logic: the verifier is fast-jwt with
 * real HS256 tokens, the clock is ours). A remembered token must answer without a second signature check, but
 * never past its `exp`, the maximum age or VERIFIED_TOKEN_TTL_MS, never for another token, and a refused token is
 * never remembered. The configured verifier's maximum age (JWT_MAX_AGE_S): an older token TOKEN_EXPIRED, one
 * without `iat` TOKEN_INVALID. Also hasBearerJwt, the shape check that lets a sold-out item answer before
 * verification.
 */
import { createSigner, createVerifier, TokenError } from 'fast-jwt';
import { buyerAuthenticator, hasBearerJwt, rememberingAuthenticator, VERIFIED_TOKEN_TTL_MS, type Authentication } from '../../src/api/auth';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/infra/logger';

const KEY = 'k'.repeat(40);
const T0 = Date.UTC(2030, 0, 1);

/** A fast-jwt HS256 verifier pinned to the test clock, counting the signature checks it runs. */
function countingVerifier(clock: { now: number }) {
  const calls = { count: 0 };
  const verify = (token: string) => {
    calls.count += 1;
    return createVerifier({ key: KEY, algorithms: ['HS256'], requiredClaims: ['sub', 'exp'], clockTimestamp: clock.now })(token) as { sub?: unknown };
  };
  return { verify, calls };
}

/** An authenticator over countingVerifier, remembering up to cacheSize tokens, with its clock and call count. */
function remembering(cacheSize = 10) {
  const clock = { now: T0 };
  const { verify, calls } = countingVerifier(clock);
  return { clock, calls, authenticate: rememberingAuthenticator(verify, cacheSize, () => clock.now) };
}

function token(sub: unknown, expAtMs: number, key = KEY): string {
  return createSigner({ key, algorithm: 'HS256', clockTimestamp: T0 })({ sub, exp: Math.floor(expAtMs / 1000) });
}

const bearer = (t: string) => `Bearer ${t}`;

test('a remembered token admits its buyer without a second signature check', () => {
  const { calls, authenticate } = remembering();
  const alice = token('alice', T0 + 3_600_000);
  expect(authenticate(bearer(alice))).toEqual({ buyerId: 'alice' });
  expect(authenticate(bearer(alice))).toEqual({ buyerId: 'alice' });
  expect(authenticate(`bearer ${alice}`)).toEqual({ buyerId: 'alice' });
  expect(calls.count).toBe(1);
  // Another token of the same buyer is checked on its own.
  expect(authenticate(bearer(token('alice', T0 + 7_200_000)))).toEqual({ buyerId: 'alice' });
  expect(calls.count).toBe(2);
});

test('a remembered token is refused as expired once past its exp', () => {
  const { clock, calls, authenticate } = remembering();
  const short = token('bob', T0 + 5_000);
  expect(authenticate(bearer(short))).toEqual({ buyerId: 'bob' });
  clock.now = T0 + 4_999;
  expect(authenticate(bearer(short))).toEqual({ buyerId: 'bob' });
  // The memory stops at exp; fast-jwt itself still admits during exp's own millisecond, then refuses.
  clock.now = T0 + 5_001;
  expect(authenticate(bearer(short))).toEqual({ error: 'TOKEN_EXPIRED' });
  expect(authenticate(bearer(short))).toEqual({ error: 'TOKEN_EXPIRED' });
  expect(calls.count).toBe(3);
});

test('a long-lived token is checked again after VERIFIED_TOKEN_TTL_MS', () => {
  const { clock, calls, authenticate } = remembering();
  const long = token('carol', T0 + 24 * 3_600_000);
  authenticate(bearer(long));
  clock.now = T0 + VERIFIED_TOKEN_TTL_MS - 1;
  authenticate(bearer(long));
  expect(calls.count).toBe(1);
  clock.now = T0 + VERIFIED_TOKEN_TTL_MS;
  expect(authenticate(bearer(long))).toEqual({ buyerId: 'carol' });
  expect(calls.count).toBe(2);
});

test('refused tokens are never remembered, and each says why', () => {
  const { calls, authenticate } = remembering();
  const forged = token('mallory', T0 + 3_600_000, 'x'.repeat(40));
  const badSub = token('alice|bob', T0 + 3_600_000);
  for (let i = 0; i < 2; i++) {
    expect(authenticate(bearer(forged))).toEqual({ error: 'TOKEN_INVALID' });
    expect(authenticate(bearer(badSub))).toEqual({ error: 'TOKEN_INVALID' });
    expect(authenticate(bearer(token(42, T0 + 3_600_000)))).toEqual({ error: 'TOKEN_INVALID' });
  }
  expect(calls.count).toBe(6);
  expect(authenticate(undefined)).toEqual({ error: 'TOKEN_MISSING' });
  expect(authenticate('')).toEqual({ error: 'TOKEN_MISSING' });
  expect(authenticate('Basic YTpi')).toEqual({ error: 'TOKEN_MISSING' });
  expect(calls.count).toBe(6);
});

test('the memory holds at most cacheSize tokens, the least recently used go first; size 0 checks every time', () => {
  const { calls, authenticate } = remembering(2);
  const [a, b, c] = ['a1', 'b1', 'c1'].map((sub) => token(sub, T0 + 3_600_000));
  authenticate(bearer(a));
  authenticate(bearer(b));
  authenticate(bearer(a));
  authenticate(bearer(c)); // evicts b, the least recently used
  expect(calls.count).toBe(3);
  authenticate(bearer(a));
  authenticate(bearer(c));
  expect(calls.count).toBe(3);
  authenticate(bearer(b));
  expect(calls.count).toBe(4);

  const forgetful = remembering(0);
  forgetful.authenticate(bearer(a));
  forgetful.authenticate(bearer(a));
  expect(forgetful.calls.count).toBe(2);
});

test('an asynchronous verifier (JWKS keys) answers through a promise, a rejection as TOKEN_INVALID or TOKEN_EXPIRED', async () => {
  const clock = { now: T0 };
  const sync = countingVerifier(clock);
  const authenticate = rememberingAuthenticator(async (t: string) => sync.verify(t), 10, () => clock.now);
  const dave = token('dave', T0 + 60_000);
  const first = authenticate(bearer(dave));
  expect(first).toBeInstanceOf(Promise);
  expect(await first).toEqual({ buyerId: 'dave' });
  // Remembered: the second answer needs no promise.
  expect(authenticate(bearer(dave))).toEqual({ buyerId: 'dave' });
  const forged: Authentication = await authenticate(bearer(token('eve', T0 + 60_000, 'y'.repeat(40))));
  expect(forged).toEqual({ error: 'TOKEN_INVALID' });
  clock.now = T0 + 60_001;
  expect(await authenticate(bearer(dave))).toEqual({ error: 'TOKEN_EXPIRED' });
  const expired = rememberingAuthenticator(
    () => Promise.reject(new TokenError(TokenError.codes.expired, 'expired')),
    10,
    () => clock.now,
  );
  expect(await expired(bearer(dave))).toEqual({ error: 'TOKEN_EXPIRED' });
});

test('a remembered token is refused as expired once older than the maximum age, though its exp is later', () => {
  const clock = { now: T0 };
  const calls = { count: 0 };
  const verify = (t: string) => {
    calls.count += 1;
    return createVerifier({ key: KEY, algorithms: ['HS256'], maxAge: 60_000, clockTimestamp: clock.now })(t) as { sub?: unknown };
  };
  const authenticate = rememberingAuthenticator(verify, 10, () => clock.now, 60_000);
  const erin = token('erin', T0 + 3_600_000); // iat T0
  expect(authenticate(bearer(erin))).toEqual({ buyerId: 'erin' });
  clock.now = T0 + 59_999;
  expect(authenticate(bearer(erin))).toEqual({ buyerId: 'erin' });
  expect(calls.count).toBe(1);
  clock.now = T0 + 60_001;
  expect(authenticate(bearer(erin))).toEqual({ error: 'TOKEN_EXPIRED' });
  expect(calls.count).toBe(2);
});

describe('JWT_MAX_AGE_S, HS256', () => {
  const log = createLogger('silent', 'test');
  const authenticatorWith = (maxAgeS: string) => buyerAuthenticator(loadConfig({ NODE_ENV: 'development', JWT_MAX_AGE_S: maxAgeS }), log);
  /** A token of the development secret issued ageS seconds ago (no `iat` at all when ageS is undefined), valid 2 h more. */
  const aged = (sub: string, ageS: number | undefined) => {
    const nowS = Math.floor(Date.now() / 1000);
    const sign = createSigner({ key: loadConfig({ NODE_ENV: 'development' }).JWT_SECRET, algorithm: 'HS256', noTimestamp: ageS === undefined });
    return bearer(sign({ sub, exp: nowS + 7200, ...(ageS === undefined ? {} : { iat: nowS - ageS }) }));
  };

  test('a token issued within the limit is admitted; older, TOKEN_EXPIRED though its exp is later; without iat, TOKEN_INVALID', async () => {
    const authenticate = authenticatorWith('600');
    expect(await authenticate(aged('fresh', 5))).toEqual({ buyerId: 'fresh' });
    expect(await authenticate(aged('old', 605))).toEqual({ error: 'TOKEN_EXPIRED' });
    expect(await authenticate(aged('ageless', undefined))).toEqual({ error: 'TOKEN_INVALID' });
  });

  test('0 admits a token of any age, with or without iat', async () => {
    const authenticate = authenticatorWith('0');
    expect(await authenticate(aged('old', 30 * 86_400))).toEqual({ buyerId: 'old' });
    expect(await authenticate(aged('ageless', undefined))).toEqual({ buyerId: 'ageless' });
  });
});

test('hasBearerJwt: a bearer token of three base64url parts (the last may be empty), nothing else', () => {
  const alice = token('alice', T0 + 3_600_000);
  expect(hasBearerJwt(bearer(alice))).toBe(true);
  expect(hasBearerJwt(`bearer ${alice}`)).toBe(true);
  expect(hasBearerJwt(bearer('eyJhbGciOiJub25lIn0.eyJzdWIiOiJtYWxsb3J5In0.'))).toBe(true);
  for (const header of [undefined, '', 'Bearer', 'Bearer ', `Basic ${alice}`, bearer('garbage'), bearer('a.b'), bearer('a.b.c.d'), bearer('a+b.c.d'), `${bearer(alice)} `, `Bearer  ${alice}`]) {
    expect(hasBearerJwt(header)).toBe(false);
  }
});
