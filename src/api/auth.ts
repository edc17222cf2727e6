/**
 * Authentication. Buyers: `Authorization: Bearer <JWT>` verified with fast-jwt against a pinned algorithm and
 * key (HS256 secret, or RS256 public key / JWKS), `exp`/`nbf` checked; the buyer is the token's `sub` and
 * nothing else (I6). Verification is synchronous (node:crypto) and verified tokens are cached until their
 * expiry, so an impatient buyer's repeated presses cost a map lookup (jose's WebCrypto path measured ~120 µs
 * per token here, more than the whole sold-out answer). Admin and payment service: static bearer credentials,
 * compared in constant time.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createVerifier, TokenError } from 'fast-jwt';
import buildGetJwks from 'get-jwks';
import type { Context, Next } from 'koa';
import type { Config } from '../config';
import { BUYER_ID } from '../domain';
import { reply } from './errors';

export interface BuyerState {
  buyerId: string;
}

function bearer(ctx: Context): string | undefined {
  const header = ctx.get('Authorization');
  // RFC 7235: the scheme name is case-insensitive.
  const match = /^Bearer ([A-Za-z0-9._~+/=-]+)$/i.exec(header);
  return match?.[1];
}

type Verify = (token: string) => { sub?: unknown } | Promise<{ sub?: unknown }>;

/** A verifier for the configured algorithm and key; JWKS keys are fetched by `kid` and cached by get-jwks. */
function createBuyerVerifier(config: Config): Verify {
  const common = {
    algorithms: [config.JWT_ALGORITHM],
    allowedIss: config.JWT_ISSUER,
    allowedAud: config.JWT_AUDIENCE,
    requiredClaims: ['sub', 'exp'],
    // fast-jwt keys its cache by a hash of the token (a raw-token key would save the hash, ~50 µs of a
    // ~190 µs sold-out answer here, but fast-jwt warns against custom keys; we keep its own).
    cache: config.JWT_CACHE_SIZE,
  };
  if (config.JWT_ALGORITHM === 'HS256') return createVerifier({ ...common, key: config.JWT_SECRET });
  if (config.JWT_PUBLIC_KEY) return createVerifier({ ...common, key: config.JWT_PUBLIC_KEY });
  const jwksUrl = new URL(config.JWT_JWKS_URL as string);
  const jwks = buildGetJwks({ jwksPath: jwksUrl.pathname, providerDiscovery: false });
  return createVerifier({
    ...common,
    key: async ({ header }: { header: { kid?: string; alg?: string } }) =>
      jwks.getPublicKey({ domain: jwksUrl.origin, kid: header.kid, alg: header.alg }),
  });
}

/**
 * Middleware that admits a buyer or answers 401 (TOKEN_MISSING, TOKEN_EXPIRED, TOKEN_INVALID — bad signature,
 * other algorithm including `none`, not yet valid, or a `sub` that is not a buyer id). Sets ctx.state.buyerId.
 */
export function buyerAuth(config: Config) {
  const verify = createBuyerVerifier(config);
  return async function authenticateBuyer(ctx: Context, next: Next): Promise<void> {
    const token = bearer(ctx);
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      return reply(ctx, 'TOKEN_MISSING');
    }
    let sub: unknown;
    try {
      ({ sub } = await verify(token));
    } catch (err) {
      ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      return reply(ctx, err instanceof TokenError && err.code === TokenError.codes.expired ? 'TOKEN_EXPIRED' : 'TOKEN_INVALID');
    }
    if (typeof sub !== 'string' || !BUYER_ID.test(sub)) {
      ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      return reply(ctx, 'TOKEN_INVALID');
    }
    (ctx.state as BuyerState).buyerId = sub;
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
    const token = bearer(ctx);
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      return reply(ctx, 'TOKEN_MISSING');
    }
    if (!timingSafeEqual(digest(token), expected)) return reply(ctx, 'FORBIDDEN');
    await next();
  };
}
