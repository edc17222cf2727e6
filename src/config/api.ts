/** The API's settings: its two doors, buyers' tokens, the services' credentials, the gate, limits, caches. */
import { isIP } from 'node:net';
import { z } from 'zod';
import { count, flag, listenPort, positiveMs, type Issue } from './kinds';

/** Development values, public in this repository: production refuses them (apiInProduction). */
export const DEV_JWT_SECRET = 'dev-only-flash-sale-jwt-secret-change-me-0123456789';
const DEV_ADMIN_TOKEN = 'dev-only-admin-token';
const DEV_PAYMENT_TOKEN = 'dev-only-payment-service-token';
const DEV_SALE_GATE_SECRET = 'dev-only-sale-gate-secret-change-me-0123456789';

/** TRUST_PROXY parsed: false, a hop count, or the trusted proxies' addresses and CIDR ranges. */
export type TrustProxy = false | { hops: number } | { addresses: string[] };

/** @returns TRUST_PROXY's value parsed, or what is wrong with it */
function parseTrustProxy(value: string): TrustProxy | string {
  if (value === 'false') return false;
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    return hops >= 1 && hops <= 32 ? { hops } : 'a hop count is 1 to 32 (or false)';
  }
  const addresses = value.split(',').map((a) => a.trim());
  const bad = addresses.filter((a) => !isAddressOrRange(a));
  return bad.length ? `false, a hop count, or IP addresses and CIDR ranges; not ${bad.join(', ')}` : { addresses };
}

function isAddressOrRange(text: string): boolean {
  const [address, bits, ...rest] = text.split('/');
  const family = isIP(address);
  if (!family || rest.length) return false;
  return bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128));
}

const secret = (min: number, fallback: string) => z.string().min(min, `must be at least ${min} characters`).default(fallback);

export const apiFields = {
  /** The public door: buyers' routes, the sale view and page, /healthz, the public contract. */
  API_HOST: z.string().min(1).default('127.0.0.1'),
  API_PORT: listenPort(3000),
  /**
   * The internal door: admin, payments, /metrics, /readyz and the whole contract, on its own listener that a
   * deployment does not expose (loopback by default).
   */
  INTERNAL_API_HOST: z.string().min(1).default('127.0.0.1'),
  INTERNAL_API_PORT: listenPort(3100),
  /** Failed credentials (admin, payment service) per client address per minute on the internal door; then 429. */
  INTERNAL_AUTH_FAILURES_PER_MIN: count(1, 1_000_000, 20),
  /** How long a client may take to send a request's headers (ms), then 408 and the connection is closed. */
  HTTP_HEADERS_TIMEOUT_MS: positiveMs(10_000),
  /** How long a client may take to send a whole request (ms), then 408. */
  HTTP_REQUEST_TIMEOUT_MS: positiveMs(30_000),
  /** Open connections per listener and process; past it new ones are closed at once. */
  HTTP_MAX_CONNECTIONS: count(1, 1_000_000, 20_000),
  /**
   * API processes `npm run api` runs (node:cluster), sharing API_PORT, each with its starter; 1 runs the API in
   * the process itself. What each keeps for itself: docs/operations.md, Several API processes.
   */
  API_PROCESSES: count(1, 256, 1),

  JWT_ALGORITHM: z.enum(['HS256', 'RS256']).default('HS256'),
  JWT_SECRET: secret(32, DEV_JWT_SECRET),
  JWT_PUBLIC_KEY: z.string().optional(),
  JWT_JWKS_URL: z.url().optional(),
  /** Required in production (iss and aud then checked on every token). */
  JWT_ISSUER: z.string().min(1).optional(),
  JWT_AUDIENCE: z.string().min(1).optional(),
  /** Oldest token admitted, from its `iat` (seconds); 0 admits any age. With a limit, `iat` is required. */
  JWT_MAX_AGE_S: count(0, 31_536_000, 86_400),
  /** JWKS: a token whose `kid` the key set lacks fetches the set again at most this often (ms). */
  JWT_JWKS_REFETCH_COOLDOWN_MS: positiveMs(30_000),
  ADMIN_TOKEN: secret(16, DEV_ADMIN_TOKEN),
  PAYMENT_SERVICE_TOKEN: secret(16, DEV_PAYMENT_TOKEN),
  /**
   * Key of payment receipts (src/order/receipt.ts), the same on the API and every worker: the internal door stamps
   * a payment's receipt, the worker judges a payment that carries a valid one at its stamp. Unset: no receipts,
   * a signal or update is judged when Temporal received it.
   */
  PAYMENT_RECEIPT_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),

  /**
   * true (default): a purchase carries its sale's gate value (header `Sale-Gate`), which the public sale view
   * hands out only from the sale's start (src/api/saleGate.ts); without it, 403 SALE_GATE_INVALID.
   */
  SALE_GATE_REQUIRED: flag(true),
  SALE_GATE_SECRET: secret(32, DEV_SALE_GATE_SECRET),

  /** Rate limits of the buyer routes (src/api/rateLimits.ts): requests per RATE_LIMIT_WINDOW_S per client IP and per buyer. */
  RATE_LIMIT_PER_IP: count(1, 1_000_000_000, 100),
  RATE_LIMIT_PER_BUYER: count(1, 1_000_000_000, 10),
  RATE_LIMIT_WINDOW_S: count(1, 3600, 1),
  /** Public reads (the sale view, the page, the clock) per RATE_LIMIT_WINDOW_S per client address. */
  RATE_LIMIT_READS_PER_IP: count(1, 1_000_000_000, 100),
  /**
   * Which X-Forwarded-For entries to believe (src/api/clientAddress.ts): false (the socket's address), a hop
   * count (that many proxies in front, each appending the address it saw), or the proxies' addresses and CIDR
   * ranges, comma-separated. Required in production, where a wrong guess either counts every buyer as the
   * balancer or lets a client pick its own address.
   */
  TRUST_PROXY: z
    .string()
    .transform((value, ctx): TrustProxy => {
      const parsed = parseTrustProxy(value);
      if (typeof parsed === 'string') {
        ctx.addIssue({ code: 'custom', message: parsed });
        return z.NEVER;
      }
      return parsed;
    })
    .optional(),

  /** How often an item flagged sold out is read again in Redis (ms): a unit that came back clears the flag. */
  SOLD_OUT_RECHECK_MS: positiveMs(1000),
  CATALOG_REFRESH_MS: positiveMs(5000),
};

type Env = z.infer<z.ZodObject<typeof apiFields>>;

export function checkApi(env: Env, issue: Issue): void {
  if (env.JWT_ALGORITHM === 'RS256' && !env.JWT_PUBLIC_KEY && !env.JWT_JWKS_URL) issue('JWT_PUBLIC_KEY', 'RS256 needs JWT_PUBLIC_KEY (PEM) or JWT_JWKS_URL');
}

/**
 * What production refuses of the API: the development secrets, an unsaid TRUST_PROXY, tokens without issuer and
 * audience, and a key set fetched over plain http.
 */
export function apiInProduction(env: Env, issue: Issue): void {
  const devValues: [string, string, string][] = [
    ['JWT_SECRET', env.JWT_SECRET, DEV_JWT_SECRET],
    ['ADMIN_TOKEN', env.ADMIN_TOKEN, DEV_ADMIN_TOKEN],
    ['PAYMENT_SERVICE_TOKEN', env.PAYMENT_SERVICE_TOKEN, DEV_PAYMENT_TOKEN],
    ['SALE_GATE_SECRET', env.SALE_GATE_SECRET, DEV_SALE_GATE_SECRET],
  ];
  for (const [name, value, dev] of devValues) {
    if (value === dev) issue(name, 'the public development value; set a secret of your own (or NODE_ENV=development)');
  }
  if (env.TRUST_PROXY === undefined) issue('TRUST_PROXY', "must be said in production: false (clients connect directly), a hop count, or the proxies' addresses");
  if (!env.JWT_ISSUER) issue('JWT_ISSUER', "required in production: the identity provider's issuer, checked on every token");
  if (!env.JWT_AUDIENCE) issue('JWT_AUDIENCE', "required in production: this service's audience, checked on every token");
  if (env.JWT_JWKS_URL && !env.JWT_JWKS_URL.startsWith('https:')) issue('JWT_JWKS_URL', 'https only in production: keys fetched in clear text can be swapped');
}
