/**
 * The internal door's services (admin, payment service): static bearer credentials, compared in constant time,
 * behind a guard against guessing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, Next } from 'koa';
import { bearer } from './auth';
import { reply } from './errors';

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** What the internal door's credential check leaves for the middleware after it: a service's token was verified. */
export interface ServiceState {
  service?: true;
}

/**
 * The internal door's guard against guessing: whether a client is blocked (too many failed credentials), and the
 * record of one failure (src/api/app.ts limits and counts them per client).
 */
export interface CredentialGuard {
  blocked(ctx: Context): Promise<{ retryAfterS: number } | undefined>;
  failed(ctx: Context, code: 'TOKEN_MISSING' | 'FORBIDDEN' | 'RATE_LIMITED'): Promise<void>;
}

/**
 * Middleware admitting only `Authorization: Bearer <secret>` (ctx.state.service): 401 without a token, 403 with
 * another one, each a failure for the guard; 429 RATE_LIMITED with Retry-After, before the token is even read,
 * while the guard blocks the client.
 */
export function staticBearer(secret: string, guard: CredentialGuard) {
  const expected = digest(secret);
  return async function authenticateService(ctx: Context, next: Next): Promise<void> {
    const blocked = await guard.blocked(ctx);
    if (blocked) {
      await guard.failed(ctx, 'RATE_LIMITED');
      ctx.set('Retry-After', String(blocked.retryAfterS));
      return reply(ctx, 'RATE_LIMITED');
    }
    const token = bearer(ctx.get('Authorization'));
    if (!token) {
      await guard.failed(ctx, 'TOKEN_MISSING');
      ctx.set('WWW-Authenticate', 'Bearer');
      return reply(ctx, 'TOKEN_MISSING');
    }
    if (!timingSafeEqual(digest(token), expected)) {
      await guard.failed(ctx, 'FORBIDDEN');
      return reply(ctx, 'FORBIDDEN');
    }
    (ctx.state as ServiceState).service = true;
    await next();
  };
}
