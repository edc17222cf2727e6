/**
 * Authentication. Buyers: `Authorization: Bearer <JWT>` verified with fast-jwt against a pinned algorithm and
 * key (HS256 secret, or RS256 public key / JWKS), `exp`/`nbf` checked; the buyer is the token's `sub` and
 * nothing else (I6). Verification is synchronous (node:crypto) and verified tokens are remembered until their
 * expiry, so an impatient buyer's repeated presses cost a map lookup (an asynchronous WebCrypto check costs
 * more than the whole sold-out answer). Admin and payment service: static bearer credentials,
 * compared in constant time.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createVerifier, TokenError } from 'fast-jwt';
import buildGetJwks from 'get-jwks';
import { LRUCache } from 'lru-cache';
import type { Context, Next } from 'koa';
import type { Config } from '../config';
import type { Logger } from '../logger';
import { BUYER_ID } from '../ids';
import { reply } from './errors';

export interface BuyerState {
  buyerId: string;
}

/**
 * Who a bearer token admits, or the code that refuses it: 401 for the token's own faults, 503
 * SERVICE_UNAVAILABLE when its key could not be fetched (the JWKS endpoint down: the token may be good).
 */
export type Authentication = { buyerId: string } | { error: 'TOKEN_MISSING' | 'TOKEN_INVALID' | 'TOKEN_EXPIRED' | 'SERVICE_UNAVAILABLE' };

/**
 * Takes an Authorization header value (undefined or '' when absent); answers synchronously when the token is
 * remembered, so the sold-out path awaits nothing.
 */
export type BuyerAuthenticator = (authorization: string | undefined) => Authentication | Promise<Authentication>;

/** A verified token is re-verified at least this often (ms), so a key withdrawn from the JWKS stops admitting it. */
export const VERIFIED_TOKEN_TTL_MS = 600_000;

const BEARER = /^Bearer ([A-Za-z0-9._~+/=-]+)$/i;
// JWS compact serialization (RFC 7515 §7.1): three base64url parts, the last empty for alg "none".
const BEARER_JWT = /^Bearer [A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/i;

/**
 * Whether an Authorization header value carries a bearer token shaped like a JWT. Says nothing of its
 * signature or claims: only for answers that are the same for every buyer (a sold-out item's 410).
 */
export function hasBearerJwt(authorization: string | undefined): boolean {
  return authorization !== undefined && BEARER_JWT.test(authorization);
}

function bearer(authorization: string | undefined): string | undefined {
  // RFC 7235: the scheme name is case-insensitive.
  return authorization ? BEARER.exec(authorization)?.[1] : undefined;
}

type Verify = (token: string) => { sub?: unknown; exp?: unknown } | Promise<{ sub?: unknown; exp?: unknown }>;

/**
 * A verifier for the configured algorithm and key; JWKS keys are fetched by `kid` and cached by get-jwks, and a
 * failed fetch other than an unknown `kid` is logged as a warning.
 */
function createBuyerVerifier(config: Config, log: Logger): Verify {
  const common = {
    algorithms: [config.JWT_ALGORITHM],
    allowedIss: config.JWT_ISSUER,
    allowedAud: config.JWT_AUDIENCE,
    // fast-jwt checks iss and aud only when the token has them: a configured one must also be required.
    requiredClaims: ['sub', 'exp', ...(config.JWT_ISSUER ? ['iss'] : []), ...(config.JWT_AUDIENCE ? ['aud'] : [])],
  };
  if (config.JWT_ALGORITHM === 'HS256') return createVerifier({ ...common, key: config.JWT_SECRET });
  if (config.JWT_PUBLIC_KEY) return createVerifier({ ...common, key: config.JWT_PUBLIC_KEY });
  const jwksUrl = new URL(config.JWT_JWKS_URL as string);
  const jwks = buildGetJwks({ jwksPath: jwksUrl.pathname, providerDiscovery: false });
  return createVerifier({
    ...common,
    key: async ({ header }: { header: { kid?: string; alg?: string } }) =>
      jwks.getPublicKey({ domain: jwksUrl.origin, kid: header.kid, alg: header.alg }).catch((err: unknown) => {
        if ((err as { code?: unknown }).code !== 'JWK_NOT_FOUND') log.warn({ err, jwksUrl: jwksUrl.href }, 'JWKS key fetch failed');
        throw err;
      }),
  });
}

function refusal(err: unknown): Authentication {
  if (!(err instanceof TokenError)) return { error: 'TOKEN_INVALID' };
  if (err.code === TokenError.codes.expired) return { error: 'TOKEN_EXPIRED' };
  // get-jwks: a set without the token's kid refuses the token; anything else (unreachable, a non-2xx or
  // non-JSON answer, an empty set) is the key server's fault, not the buyer's.
  const cause = (err as { originalError?: { code?: unknown } }).originalError;
  if (err.code === TokenError.codes.keyFetchingError && cause?.code !== 'JWK_NOT_FOUND') return { error: 'SERVICE_UNAVAILABLE' };
  return { error: 'TOKEN_INVALID' };
}

/**
 * @param verify fast-jwt's verifier (tests pass their own clock through `now`)
 * @param cacheSize how many verified tokens to remember (VERIFIED_TOKENS; 0 verifies every request)
 * @param now clock in ms since the epoch
 * @returns the authenticator: TOKEN_MISSING without a bearer token; TOKEN_EXPIRED past `exp`; TOKEN_INVALID for
 *   a bad signature, another algorithm including `none`, not yet valid, or a `sub` that is not a buyer id;
 *   SERVICE_UNAVAILABLE when the verifier could not fetch the token's key (JWKS)
 */
export function rememberingAuthenticator(verify: Verify, cacheSize: number, now: () => number = Date.now): BuyerAuthenticator {
  // Keyed by the whole token, so two tokens can never share an entry (the collision risk fast-jwt warns of
  // for custom cache keys; its own key is a SHA-256 of the token, a cost per request we need not pay).
  // lru-cache, not a Map evicting its first key: once full, V8 skips the deleted entries on every
  // keys().next(), and each insert slows with the number evicted.
  const verified = cacheSize > 0 ? new LRUCache<string, { buyerId: string; validUntilMs: number }>({ max: cacheSize }) : undefined;

  const admit = (token: string, payload: { sub?: unknown; exp?: unknown }): Authentication => {
    const { sub, exp } = payload;
    if (typeof sub !== 'string' || !BUYER_ID.test(sub)) return { error: 'TOKEN_INVALID' };
    verified?.set(token, { buyerId: sub, validUntilMs: Math.min((exp as number) * 1000, now() + VERIFIED_TOKEN_TTL_MS) });
    return { buyerId: sub };
  };

  return (authorization) => {
    const token = bearer(authorization);
    if (!token) return { error: 'TOKEN_MISSING' };
    const known = verified?.get(token);
    if (known) {
      if (now() < known.validUntilMs) return { buyerId: known.buyerId };
      verified?.delete(token);
    }
    let payload;
    try {
      payload = verify(token);
    } catch (err) {
      return refusal(err);
    }
    return payload instanceof Promise ? payload.then((p) => admit(token, p), refusal) : admit(token, payload);
  };
}

/**
 * Verified tokens an API process remembers until their expiry, so a buyer's repeated presses skip the signature
 * check: a stampede's buyers, at about 200 bytes each; not a setting, as no operator has a reason to trade it.
 */
const VERIFIED_TOKENS = 100_000;

/** @returns the authenticator for the configured algorithm and key */
export function buyerAuthenticator(config: Config, log: Logger): BuyerAuthenticator {
  return rememberingAuthenticator(createBuyerVerifier(config, log), VERIFIED_TOKENS);
}

/** Answers a 401 code with the RFC 6750 WWW-Authenticate challenge; SERVICE_UNAVAILABLE as 503 with Retry-After. */
export function refuseToken(ctx: Context, code: Extract<Authentication, { error: unknown }>['error']): void {
  if (code !== 'SERVICE_UNAVAILABLE') ctx.set('WWW-Authenticate', code === 'TOKEN_MISSING' ? 'Bearer' : 'Bearer error="invalid_token"');
  reply(ctx, code);
}

/** Middleware that admits a buyer (ctx.state.buyerId) or answers 401 through refuseToken. */
export function buyerAuth(authenticate: BuyerAuthenticator) {
  return async function authenticateBuyer(ctx: Context, next: Next): Promise<void> {
    const auth = await authenticate(ctx.get('Authorization'));
    if ('error' in auth) return refuseToken(ctx, auth.error);
    (ctx.state as BuyerState).buyerId = auth.buyerId;
    await next();
  };
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** Middleware admitting only `Authorization: Bearer <secret>`: 401 without a token, 403 with another one. */
export function staticBearer(secret: string) {
  const expected = digest(secret);
  return async function authenticateService(ctx: Context, next: Next): Promise<void> {
    const token = bearer(ctx.get('Authorization'));
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      return reply(ctx, 'TOKEN_MISSING');
    }
    if (!timingSafeEqual(digest(token), expected)) return reply(ctx, 'FORBIDDEN');
    await next();
  };
}
