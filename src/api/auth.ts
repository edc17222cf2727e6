/**
 * Authentication. Buyers: `Authorization: Bearer <JWT>` verified with fast-jwt against a pinned algorithm and
 * key (HS256 secret, or RS256 public key / JWKS), `exp`/`nbf` checked, `iss`/`aud`/age (`iat`) when configured;
 * the buyer is the token's `sub` and nothing else (I6). Verification is synchronous (node:crypto) and verified
 * tokens are remembered until their expiry, so an impatient buyer's repeated presses cost a map lookup (an
 * asynchronous WebCrypto check costs more than the whole sold-out answer). Services' credentials: serviceAuth.ts.
 */
import { createVerifier, TokenError } from 'fast-jwt';
import buildGetJwks from 'get-jwks';
import { LRUCache } from 'lru-cache';
import type { Context, Next } from 'koa';
import type { Config } from '../config';
import type { Logger } from '../infra/logger';
import { BUYER_ID } from '../order/ids';
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

/** @returns the token of an `Authorization: Bearer <token>` header, or undefined for any other */
export function bearer(authorization: string | undefined): string | undefined {
  // RFC 7235: the scheme name is case-insensitive.
  return authorization ? BEARER.exec(authorization)?.[1] : undefined;
}

type Claims = { sub?: unknown; exp?: unknown; iat?: unknown };
type Verify = (token: string) => Claims | Promise<Claims>;

/** How long a fetch of the key set may take (ms), as get-jwks allows its own. */
const JWKS_FETCH_TIMEOUT_MS = 5_000;
/** get-jwks' code for a key set without the token's `kid`: the token's fault (TOKEN_INVALID), not the server's. */
const UNKNOWN_KID = 'JWK_NOT_FOUND';

/**
 * The key for a token's header from the JWKS endpoint: PEM through get-jwks, which caches each key a minute (then
 * serves the stale one while a refetch fails) but fetches the set again for every `kid` it has not cached, with no
 * negative caching. So a flood of tokens with random kids would be a flood of fetches to the identity provider:
 * here a kid is passed to get-jwks only when the key set last read lists it; otherwise the set is read again, at
 * most once per JWT_JWKS_REFETCH_COOLDOWN_MS, and within that an unlisted kid is refused (UNKNOWN_KID) without a
 * fetch, or with the last read's failure. The whole set's kids are kept, not only the one asked for, so that the
 * flood's own read teaches a new process, or a rotation, every key the provider publishes.
 * @returns fast-jwt's key callback; it rejects with an error of code UNKNOWN_KID for a kid the set lacks, with
 *   any other error (logged as a warning, once per read) when the key set could not be read
 */
function jwksKey(config: Config, log: Logger) {
  const jwksUrl = new URL(config.JWT_JWKS_URL as string);
  const jwks = buildGetJwks({ jwksPath: jwksUrl.pathname, providerDiscovery: false });
  const warn = (err: unknown) => log.warn({ err, jwksUrl: jwksUrl.href }, 'JWKS key fetch failed');
  let listed = new Set<unknown>();
  let reading: Promise<void> | undefined;
  let readAtMs = 0;
  const read = async () => {
    const response = await fetch(jwksUrl, { signal: AbortSignal.timeout(JWKS_FETCH_TIMEOUT_MS) });
    const body = (await response.json()) as { keys?: { kid?: unknown }[] };
    if (!response.ok || !Array.isArray(body.keys) || body.keys.length === 0) throw new Error(`the key set answered ${response.status} without keys`);
    listed = new Set(body.keys.map((key) => key.kid));
  };
  return async ({ header }: { header: { kid?: string; alg?: string } }) => {
    if (!listed.has(header.kid)) {
      if (!reading || Date.now() - readAtMs >= config.JWT_JWKS_REFETCH_COOLDOWN_MS) {
        readAtMs = Date.now();
        reading = read().catch((err: unknown) => {
          warn(err);
          throw err;
        });
      }
      await reading;
      if (!listed.has(header.kid)) throw Object.assign(new Error('no key with this kid in the key set'), { code: UNKNOWN_KID });
    }
    return jwks.getPublicKey({ domain: jwksUrl.origin, kid: header.kid, alg: header.alg }).catch((err: unknown) => {
      // A key withdrawn since the set was read: its kid goes back behind the cooldown.
      if ((err as { code?: unknown }).code === UNKNOWN_KID) listed.delete(header.kid);
      else warn(err);
      throw err;
    });
  };
}

/**
 * A verifier for the configured algorithm and key (JWKS: jwksKey). With JWT_MAX_AGE_S, a token must carry `iat`
 * and be younger than that: one without `iat` is TOKEN_INVALID (a fresh token from the same issuer would lack it
 * too, so there is nothing to renew), an older one fails as fast-jwt's 'expired', hence TOKEN_EXPIRED (the token
 * was good and has aged out: the client should get a new one, as past `exp`).
 */
function createBuyerVerifier(config: Config, log: Logger): Verify {
  const maxAge = config.JWT_MAX_AGE_S > 0;
  const common = {
    algorithms: [config.JWT_ALGORITHM],
    allowedIss: config.JWT_ISSUER,
    allowedAud: config.JWT_AUDIENCE,
    ...(maxAge ? { maxAge: config.JWT_MAX_AGE_S * 1000 } : {}),
    // fast-jwt checks iss, aud and the age only when the token has the claim: a configured one must be required.
    requiredClaims: ['sub', 'exp', ...(config.JWT_ISSUER ? ['iss'] : []), ...(config.JWT_AUDIENCE ? ['aud'] : []), ...(maxAge ? ['iat'] : [])],
  };
  if (config.JWT_ALGORITHM === 'HS256') return createVerifier({ ...common, key: config.JWT_SECRET });
  if (config.JWT_PUBLIC_KEY) return createVerifier({ ...common, key: config.JWT_PUBLIC_KEY });
  return createVerifier({ ...common, key: jwksKey(config, log) });
}

function refusal(err: unknown): Authentication {
  if (!(err instanceof TokenError)) return { error: 'TOKEN_INVALID' };
  if (err.code === TokenError.codes.expired) return { error: 'TOKEN_EXPIRED' };
  // A set without the token's kid refuses the token; anything else (unreachable, a non-2xx or non-JSON answer,
  // an empty set) is the key server's fault, not the buyer's.
  const cause = (err as { originalError?: { code?: unknown } }).originalError;
  if (err.code === TokenError.codes.keyFetchingError && cause?.code !== UNKNOWN_KID) return { error: 'SERVICE_UNAVAILABLE' };
  return { error: 'TOKEN_INVALID' };
}

/**
 * @param verify fast-jwt's verifier (tests pass their own clock through `now`)
 * @param cacheSize how many verified tokens to remember (VERIFIED_TOKENS; 0 verifies every request)
 * @param now clock in ms since the epoch
 * @param maxAgeMs the verifier's maximum token age from `iat` (ms; 0 for none), so a token is not remembered past it
 * @returns the authenticator: TOKEN_MISSING without a bearer token; TOKEN_EXPIRED past `exp` or the maximum age;
 *   TOKEN_INVALID for a bad signature, another algorithm including `none`, not yet valid, a required claim
 *   missing, or a `sub` that is not a buyer id; SERVICE_UNAVAILABLE when the verifier could not fetch the token's
 *   key (JWKS)
 */
export function rememberingAuthenticator(verify: Verify, cacheSize: number, now: () => number = Date.now, maxAgeMs = 0): BuyerAuthenticator {
  // Keyed by the whole token, so two tokens can never share an entry (the collision risk fast-jwt warns of
  // for custom cache keys; its own key is a SHA-256 of the token, a cost per request we need not pay).
  // lru-cache, not a Map evicting its first key: once full, V8 skips the deleted entries on every
  // keys().next(), and each insert slows with the number evicted.
  const verified = cacheSize > 0 ? new LRUCache<string, { buyerId: string; validUntilMs: number }>({ max: cacheSize }) : undefined;

  const admit = (token: string, payload: Claims): Authentication => {
    const { sub, exp, iat } = payload;
    if (typeof sub !== 'string' || !BUYER_ID.test(sub)) return { error: 'TOKEN_INVALID' };
    const agedOutMs = maxAgeMs > 0 ? (iat as number) * 1000 + maxAgeMs : Infinity;
    verified?.set(token, { buyerId: sub, validUntilMs: Math.min((exp as number) * 1000, agedOutMs, now() + VERIFIED_TOKEN_TTL_MS) });
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
  return rememberingAuthenticator(createBuyerVerifier(config, log), VERIFIED_TOKENS, Date.now, config.JWT_MAX_AGE_S * 1000);
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
