/**
 * Rate limits of the buyer routes (purchase, GET order), per client IP and per buyer, with rate-limiter-flexible's
 * in-memory limiter: fixed windows of RATE_LIMIT_WINDOW_S seconds, RATE_LIMIT_PER_IP and RATE_LIMIT_PER_BUYER
 * requests each. In memory, per API process: a limit costs no round trip to Redis, the store the stampede
 * already leans on, and N processes admit at most N times the limit (a gateway in front would hold a global
 * one). Over a limit: 429 RATE_LIMITED with Retry-After (whole seconds), nothing else done. The client IP is the
 * socket's, or X-Forwarded-For's first hop when TRUST_PROXY is on.
 */
import type { Context } from 'koa';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { Config } from '../config';
import { reply } from './errors';

/** How a request fared: admitted, or refused with the seconds to wait. */
export type Limited = undefined | { retryAfterS: number };

/** The two limiters of one API process; `enabled` false (RATE_LIMIT_ENABLED) admits everything uncounted. */
export class RateLimits {
  readonly enabled: boolean;
  private readonly byIp: RateLimiterMemory;
  private readonly byBuyer: RateLimiterMemory;

  constructor(config: Pick<Config, 'RATE_LIMIT_ENABLED' | 'RATE_LIMIT_PER_IP' | 'RATE_LIMIT_PER_BUYER' | 'RATE_LIMIT_WINDOW_S'>) {
    this.enabled = config.RATE_LIMIT_ENABLED;
    this.byIp = new RateLimiterMemory({ keyPrefix: 'ip', points: config.RATE_LIMIT_PER_IP, duration: config.RATE_LIMIT_WINDOW_S });
    this.byBuyer = new RateLimiterMemory({ keyPrefix: 'buyer', points: config.RATE_LIMIT_PER_BUYER, duration: config.RATE_LIMIT_WINDOW_S });
  }

  /** Counts one request of the client IP. @returns undefined when admitted (or limits are off) */
  ip(ip: string): Promise<Limited> {
    return this.enabled ? take(this.byIp, ip) : Promise.resolve(undefined);
  }

  /** Counts one request of the buyer (the verified token's sub). @returns undefined when admitted (or limits are off) */
  buyer(buyerId: string): Promise<Limited> {
    return this.enabled ? take(this.byBuyer, buyerId) : Promise.resolve(undefined);
  }
}

async function take(limiter: RateLimiterMemory, key: string): Promise<Limited> {
  try {
    await limiter.consume(key);
    return undefined;
  } catch (res) {
    if (res instanceof RateLimiterRes) return { retryAfterS: Math.max(1, Math.ceil(res.msBeforeNext / 1000)) };
    throw res;
  }
}

/** Answers 429 RATE_LIMITED with its Retry-After (whole seconds). */
export function replyRateLimited(ctx: Context, limited: NonNullable<Limited>): void {
  ctx.set('Retry-After', String(limited.retryAfterS));
  reply(ctx, 'RATE_LIMITED');
}
