/**
 * Authentication. Buyers: `Authorization: Bearer <JWT>` verified with jose against a pinned algorithm and key
 * (HS256 secret, or RS256 public key / JWKS), `exp`/`nbf` checked; the buyer is the token's `sub` and nothing
 * else (I6). Admin and payment service: static bearer credentials, compared in constant time.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createRemoteJWKSet, errors, importSPKI, jwtVerify, type CryptoKey, type JWTVerifyGetKey } from 'jose';
import type { Context, Next } from 'koa';
import type { Config } from '../config';
import { BUYER_ID } from '../domain';
import { reply } from './errors';

export interface BuyerState {
  buyerId: string;
}

function bearer(ctx: Context): string | undefined {
  const header = ctx.get('Authorization');
  const match = /^Bearer ([A-Za-z0-9._~+/=-]+)$/.exec(header);
  return match?.[1];
}

async function verificationKey(config: Config): Promise<Uint8Array | CryptoKey | JWTVerifyGetKey> {
  if (config.JWT_ALGORITHM === 'HS256') return new TextEncoder().encode(config.JWT_SECRET);
  if (config.JWT_PUBLIC_KEY) return importSPKI(config.JWT_PUBLIC_KEY, 'RS256');
  return createRemoteJWKSet(new URL(config.JWT_JWKS_URL as string));
}

/**
 * Middleware that admits a buyer or answers 401 (TOKEN_MISSING, TOKEN_EXPIRED, TOKEN_INVALID — bad signature,
 * other algorithm including `none`, not yet valid, or a `sub` that is not a buyer id). Sets ctx.state.buyerId.
 */
export async function buyerAuth(config: Config) {
  const key = await verificationKey(config);
  const options = {
    algorithms: [config.JWT_ALGORITHM],
    issuer: config.JWT_ISSUER,
    audience: config.JWT_AUDIENCE,
    requiredClaims: ['sub', 'exp'],
  };
  return async function authenticateBuyer(ctx: Context, next: Next): Promise<void> {
    const token = bearer(ctx);
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      return reply(ctx, 'TOKEN_MISSING');
    }
    let sub: unknown;
    try {
      // jose accepts a key or a key resolver; the union needs the cast to pick an overload.
      ({ payload: { sub } } = await jwtVerify(token, key as Uint8Array, options));
    } catch (err) {
      ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      return reply(ctx, err instanceof errors.JWTExpired ? 'TOKEN_EXPIRED' : 'TOKEN_INVALID');
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
