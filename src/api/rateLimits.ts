/**
 * Rate limits in memory per API process (rate-limiter-flexible): the buyer routes per client and per buyer, the
 * public reads per client, the internal door's failed credentials per client. In memory, no round trip to Redis,
 * the store the stampede leans on; N processes admit at most N times a limit. Over it: 429 with Retry-After.
 */
import type { Context } from 'koa';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { Config } from '../config';
import { reply } from './errors';

/** How a request fared: admitted, or refused with the seconds to wait. */
export type Limited = undefined | { retryAfterS: number };

/** The limiters of one API process: per client address and per buyer on the buyer routes, reads, failed credentials. */
export class RateLimits {
  private readonly byIp: RateLimiterMemory;
  private readonly byBuyer: RateLimiterMemory;
  private readonly reads: RateLimiterMemory;
  private readonly authFailures: RateLimiterMemory;

  constructor(
    config: Pick<Config, 'RATE_LIMIT_PER_IP' | 'RATE_LIMIT_PER_BUYER' | 'RATE_LIMIT_READS_PER_IP' | 'RATE_LIMIT_WINDOW_S' | 'INTERNAL_AUTH_FAILURES_PER_MIN'>,
  ) {
    this.byIp = new RateLimiterMemory({ keyPrefix: 'ip', points: config.RATE_LIMIT_PER_IP, duration: config.RATE_LIMIT_WINDOW_S });
    this.byBuyer = new RateLimiterMemory({ keyPrefix: 'buyer', points: config.RATE_LIMIT_PER_BUYER, duration: config.RATE_LIMIT_WINDOW_S });
    this.reads = new RateLimiterMemory({ keyPrefix: 'read', points: config.RATE_LIMIT_READS_PER_IP, duration: config.RATE_LIMIT_WINDOW_S });
    this.authFailures = new RateLimiterMemory({ keyPrefix: 'auth', points: config.INTERNAL_AUTH_FAILURES_PER_MIN, duration: 60 });
  }

  /** Counts one buyer-route request of the client (clientKeyOf). @returns undefined when admitted */
  ip(client: string): Promise<Limited> {
    return take(this.byIp, client);
  }

  /** Counts one public read of the client. @returns undefined when admitted */
  read(client: string): Promise<Limited> {
    return take(this.reads, client);
  }

  /** @returns how long the client must wait when its failed credentials reached the limit, else undefined */
  async credentialsBlocked(client: string): Promise<Limited> {
    const res = await this.authFailures.get(client);
    return res && res.remainingPoints <= 0 ? { retryAfterS: Math.max(1, Math.ceil(res.msBeforeNext / 1000)) } : undefined;
  }

  /** Counts one failed credential of the client (wrong or missing token on the internal door). */
  async credentialFailed(client: string): Promise<void> {
    await this.authFailures.penalty(client);
  }

  /** Counts one request of the buyer (the verified token's sub). @returns undefined when admitted */
  buyer(buyerId: string): Promise<Limited> {
    return take(this.byBuyer, buyerId);
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
