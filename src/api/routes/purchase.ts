/**
 * POST /api/flash-sales/items/{itemId}/purchase — the front door of the stampede.
 * 202 PENDING (with the payment deadline) once Redis holds the reservation and its start queue entry, written
 * together by reserve.lua; the starter (src/starter/starter.ts) starts the order's workflow afterwards, so no purchase
 * waits for Temporal (I4). 409 ALREADY_PURCHASED (with the buyer's own live orderId); 410 SOLD_OUT;
 * 400/403/404/503 otherwise, each changing nothing (I7): 403 SALE_NOT_ACTIVE outside the sale's times, 403
 * SALE_GATE_INVALID without the sale's gate value (saleGate.ts), both before any Redis call.
 * Cheap path, all synchronous and before the catalog, the sale window and any Redis call: id parse → sold-out
 * flag (memory) → 410 once the bearer token is present and JWT-shaped; its signature and claims are checked
 * only when the answer depends on who the buyer is (SOLD_OUT_VERIFIES_TOKEN=true checks them first).
 * Rate limits (rateLimits.ts) come after that 410, which costs less than counting it and acts for no one: the
 * client IP's before the token is verified (a flood of bad tokens costs no signature checks), the buyer's
 * right after; 429 RATE_LIMITED with Retry-After.
 */
import type { Context, Next } from 'koa';
import type { Counter, Histogram } from 'prom-client';
import { parseId } from '../../ids';
import { newOrderId } from '../../order/id';
import { hasBearerJwt, refuseToken, type Authentication, type BuyerAuthenticator } from '../auth';
import type { AppDeps } from '../deps';
import { reply, type ErrorCode } from '../errors';
import { replyRateLimited, type Limited, type RateLimits } from '../rateLimits';
import { SALE_GATE_HEADER, type SaleGates } from '../saleGate';

// As @koa/router matched it: letter case ignored, one trailing slash allowed.
const PURCHASE_PATH = /^\/api\/flash-sales\/items\/([^/]+)\/purchase\/?$/i;

/** Decodes a path segment as @koa/router would (`%31` → `1`); a malformed escape stays as it is (→ 400). */
function segment(raw: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** One purchase request on its way through the route. */
interface Attempt {
  ctx: Context;
  /** performance.now() when the route took the request, for the latency histogram. */
  startedAt: number;
  /** The item id path segment, decoded. */
  itemText: string;
  /** itemText parsed; undefined when it is not a valid item id (→ 400 once the token is verified). */
  itemId: number | undefined;
  buyerId: string | undefined;
}

/**
 * Middleware for the stampede's route, mounted ahead of the router: the sold-out answer is 98% of the traffic,
 * and @koa/router's per-request matching over every route and middleware composition cost more than the
 * answer itself. Other methods on this path answer as the router answers them elsewhere (OPTIONS 200, any other
 * 405, each with `Allow: POST`); other paths go on to the router. Every POST answer,
 * refusals of the token and errors included, is counted in the purchase metrics under its code.
 * @param authenticate the buyer authenticator shared with the other buyer routes
 * @param gates the sale gates, checked when SALE_GATE_REQUIRED
 * @param limits the buyer routes' rate limits, shared with GET order
 * @param replyToError answers what the route throws (the app's JSON error replies) and returns the code it answered
 */
export function purchaseRoute(deps: AppDeps, authenticate: BuyerAuthenticator, gates: SaleGates, limits: RateLimits, replyToError: (ctx: Context, err: unknown) => ErrorCode) {
  const { catalog, store, soldOut, starter, metrics, log, config } = deps;

  const debug = log.isLevelEnabled('debug');
  // The answer for a sold-out item is the same for every buyer and acts on no one's behalf (I6, I7), so its
  // token's signature and claims need not be checked: that check costs more than the whole answer.
  const soldOutFirst = config.SOLD_OUT_CACHE && !config.SOLD_OUT_VERIFIES_TOKEN;
  // Label children bound once per outcome code, so an answer skips prom-client's label lookups (SOLD_OUT goes
  // through the metrics' batch instead).
  const bound = new Map<string, { outcomes: ReturnType<Counter['labels']>; duration: ReturnType<Histogram['labels']> }>();
  const seriesOf = (code: string) => {
    let children = bound.get(code);
    if (!children) {
      children = { outcomes: metrics.purchaseOutcomes.labels(code), duration: metrics.purchaseDuration.labels(code) };
      bound.set(code, children);
    }
    return children;
  };

  const record = (attempt: Attempt, code: string, orderId?: unknown) => {
    const seconds = (performance.now() - attempt.startedAt) / 1000;
    if (code === 'SOLD_OUT') {
      metrics.recordSoldOut(seconds);
    } else {
      const series = seriesOf(code);
      series.outcomes.inc();
      series.duration.observe(seconds);
    }
    if (debug) log.debug({ code, itemId: attempt.itemText, userId: attempt.buyerId, orderId }, 'purchase');
  };

  const answer = (attempt: Attempt, code: ErrorCode | 'PENDING', details?: Record<string, unknown>) => {
    const { ctx } = attempt;
    if (code === 'PENDING') {
      ctx.status = 202;
      ctx.body = { orderId: details?.orderId, status: 'PENDING', paymentDeadline: details?.paymentDeadline };
    } else {
      reply(ctx, code, details);
    }
    record(attempt, code, details?.orderId);
  };

  const answerError = (attempt: Attempt, err: unknown) => record(attempt, replyToError(attempt.ctx, err));

  const refuseRate = (attempt: Attempt, limited: NonNullable<Limited>) => {
    replyRateLimited(attempt.ctx, limited);
    record(attempt, 'RATE_LIMITED');
  };

  /** Everything after the token: synchronous up to the sold-out flag, a promise from the catalog on. */
  const purchase = (attempt: Attempt, auth: Authentication): void | Promise<void> => {
    if ('error' in auth) {
      refuseToken(attempt.ctx, auth.error);
      return record(attempt, auth.error);
    }
    const { buyerId } = auth;
    attempt.buyerId = buyerId;
    const { itemId } = attempt;
    if (itemId === undefined) return answer(attempt, 'INVALID_ITEM_ID');
    if (config.SOLD_OUT_CACHE && soldOut.has(itemId)) return answer(attempt, 'SOLD_OUT');
    if (!limits.enabled) return reserve(attempt, buyerId, itemId);
    return limits.buyer(buyerId).then((limited) => (limited ? refuseRate(attempt, limited) : reserve(attempt, buyerId, itemId)));
  };

  /** From the token on: verification, then purchase. */
  const admit = (attempt: Attempt, authorization: string | undefined): void | Promise<void> => {
    try {
      const auth = authenticate(authorization);
      const done = auth instanceof Promise ? auth.then((a) => purchase(attempt, a)) : purchase(attempt, auth);
      if (done) return done.catch((err: unknown) => answerError(attempt, err));
    } catch (err) {
      answerError(attempt, err);
    }
  };

  const reserve = async (attempt: Attempt, buyerId: string, itemId: number): Promise<void> => {
    const item = await catalog.get(itemId);
    if (!item) return answer(attempt, 'ITEM_NOT_FOUND');
    const now = Date.now();
    if (now < item.startsAtMs || now >= item.endsAtMs) return answer(attempt, 'SALE_NOT_ACTIVE');
    if (config.SALE_GATE_REQUIRED && !gates.admits(item.saleId, attempt.ctx.req.headers[SALE_GATE_HEADER])) return answer(attempt, 'SALE_GATE_INVALID');

    const order = {
      orderId: newOrderId(item.saleId),
      saleId: item.saleId,
      itemId,
      userId: buyerId,
      priceMinor: item.priceMinor,
      paymentWindowMs: item.paymentWindowMs,
      reservedAtMs: now,
    };
    let outcome;
    try {
      outcome = await store.reserve(order);
    } catch (err) {
      log.warn({ err, itemId, userId: buyerId }, 'redis unavailable for reserve');
      return answer(attempt, 'SERVICE_UNAVAILABLE');
    }
    switch (outcome.kind) {
      case 'ALREADY_PURCHASED':
        return answer(attempt, 'ALREADY_PURCHASED', { orderId: outcome.orderId });
      case 'SOLD_OUT':
        soldOut.flag(item.saleId, itemId);
        return answer(attempt, 'SOLD_OUT');
      case 'NOT_LOADED':
        log.error({ itemId, saleId: item.saleId }, 'stock not loaded in redis: run `npm run sale -- load`');
        return answer(attempt, 'STOCK_NOT_LOADED');
    }
    metrics.reservations.inc();
    if (outcome.stockLeft === 0) soldOut.flag(item.saleId, itemId);
    // The reservation and its start queue entry are in Redis: the order is accepted, its workflow is the
    // starter's to start (I4). This process's starter is told, so the start does not wait for its next poll.
    starter.notice(item.saleId);
    return answer(attempt, 'PENDING', { orderId: order.orderId, paymentDeadline: new Date(now + item.paymentWindowMs).toISOString() });
  };

  return function purchaseRouteMiddleware(ctx: Context, next: Next): void | Promise<void> {
    const match = PURCHASE_PATH.exec(ctx.path);
    if (!match) return next();
    if (ctx.method !== 'POST') {
      ctx.set('Allow', 'POST');
      if (ctx.method !== 'OPTIONS') return reply(ctx, 'METHOD_NOT_ALLOWED');
      ctx.status = 200;
      ctx.body = '';
      return;
    }
    const itemText = segment(match[1]);
    const attempt: Attempt = { ctx, startedAt: performance.now(), itemText, itemId: parseId(itemText), buyerId: undefined };
    const { authorization } = ctx.req.headers;
    if (soldOutFirst && attempt.itemId !== undefined && soldOut.has(attempt.itemId) && hasBearerJwt(authorization)) {
      return answer(attempt, 'SOLD_OUT');
    }
    if (!limits.enabled) return admit(attempt, authorization);
    return limits.ip(ctx.ip).then(
      (limited) => (limited ? refuseRate(attempt, limited) : admit(attempt, authorization)),
      (err: unknown) => answerError(attempt, err),
    );
  };
}
