/**
 * POST /api/flash-sales/items/{itemId}/purchase — the front door of the stampede.
 * 202 PENDING once a unit is reserved in Redis and the order's workflow has started; 409 ALREADY_PURCHASED
 * (with the buyer's own live orderId); 410 SOLD_OUT; 400/403/404/503 otherwise, each changing nothing (I7),
 * but for a 503 after a workflow start that Temporal cannot account for: that reservation is the reconciler's.
 * Cheap path, all synchronous and before the catalog, the sale window and any Redis call: id parse → sold-out
 * flag (memory) → 410 once the bearer token is present and JWT-shaped; its signature and claims are checked
 * only when the answer depends on who the buyer is (SOLD_OUT_VERIFIES_TOKEN=true checks them first).
 */
import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import type { Counter, Histogram } from 'prom-client';
import { parseId } from '../domain';
import { hasBearerJwt, refuseToken, type Authentication, type BuyerAuthenticator } from './auth';
import type { AppDeps } from './app';
import { reply, type ErrorCode } from './errors';
import type { OrderWorkflows } from './orderWorkflows';

/** @returns whether a workflow with this id exists; undefined when Temporal cannot tell */
function workflowExists(workflows: OrderWorkflows, workflowId: string): Promise<boolean | undefined> {
  return workflows.describe(workflowId).then(
    (order) => order !== undefined,
    () => undefined,
  );
}

// As @koa/router matched it: letter case ignored, one trailing slash allowed.
const PURCHASE_PATH = /^\/api\/flash-sales\/items\/([^/]+)\/purchase\/?$/i;
const ROUTER_METHODS = new Set(['HEAD', 'OPTIONS', 'GET', 'PUT', 'PATCH', 'POST', 'DELETE']);

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
 * answer itself. Other methods on this path answer as the router answers them elsewhere (OPTIONS 200, known
 * methods 405, unknown ones 501, each with `Allow: POST`); other paths go on to the router. Every POST answer,
 * refusals of the token and errors included, is counted in the purchase metrics under its code.
 * @param authenticate the buyer authenticator shared with the other buyer routes
 * @param replyToError answers what the route throws (the app's JSON error replies) and returns the code it answered
 */
export function purchaseRoute(deps: AppDeps, authenticate: BuyerAuthenticator, replyToError: (ctx: Context, err: unknown) => ErrorCode) {
  const { catalog, store, soldOut, workflows, metrics, log, config } = deps;

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
      ctx.body = { orderId: details?.orderId, status: 'PENDING' };
    } else {
      reply(ctx, code, details);
    }
    record(attempt, code, details?.orderId);
  };

  const answerError = (attempt: Attempt, err: unknown) => record(attempt, replyToError(attempt.ctx, err));

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
    return reserveAndStart(attempt, buyerId, itemId);
  };

  const reserveAndStart = async (attempt: Attempt, buyerId: string, itemId: number): Promise<void> => {
    const item = await catalog.get(itemId);
    if (!item) return answer(attempt, 'ITEM_NOT_FOUND');
    const now = Date.now();
    if (now < item.startsAtMs || now >= item.endsAtMs) return answer(attempt, 'SALE_NOT_ACTIVE');

    const orderId = randomUUID();
    let outcome;
    try {
      outcome = await store.reserve(item.saleId, itemId, buyerId, orderId, now);
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
    metrics.reservations.inc({ result: 'reserved' });
    if (outcome.stockLeft === 0) soldOut.flag(item.saleId, itemId);

    try {
      // 'already-started' too means the order has its workflow (the reconciler adopted a slow start first, I4).
      await workflows.start({
        orderId,
        saleId: item.saleId,
        itemId,
        userId: buyerId,
        priceMinor: item.priceMinor,
        paymentWindowMs: item.paymentWindowMs,
        reservedAtMs: now,
      });
    } catch (err) {
      // The start may have reached the server even though we saw an error (a timeout, or the reconciler
      // adopting a slow start): then the order has its workflow and is accepted (I4).
      const exists = await workflowExists(workflows, orderId);
      if (exists) return answer(attempt, 'PENDING', { orderId });
      if (exists === undefined) {
        // Releasing now could hand back the unit of a workflow that did start (I1). The reservation stays;
        // the reconciler finds its workflow or starts one (I4), and the buyer's retry gets 409 with this order.
        log.warn({ err, orderId, itemId, userId: buyerId }, 'workflow start failed and Temporal cannot tell whether it began; reservation left to the reconciler');
        return answer(attempt, 'SERVICE_UNAVAILABLE');
      }
      // No workflow, no promise: give the unit back before saying 503. If this release fails too, the
      // reconciler finds the reservation without a workflow and adopts it.
      log.warn({ err, orderId, itemId, userId: buyerId }, 'workflow start failed; releasing reservation');
      await store
        .release(item.saleId, itemId, orderId)
        .then(() => metrics.reservations.inc({ result: 'released_start_failed' }))
        .catch((releaseErr) => log.error({ err: releaseErr, orderId, itemId }, 'release after failed start failed'));
      return answer(attempt, 'SERVICE_UNAVAILABLE');
    }
    return answer(attempt, 'PENDING', { orderId });
  };

  return function purchaseRouteMiddleware(ctx: Context, next: Next): void | Promise<void> {
    const match = PURCHASE_PATH.exec(ctx.path);
    if (!match) return next();
    if (ctx.method !== 'POST') {
      ctx.set('Allow', 'POST');
      if (ctx.method !== 'OPTIONS') return reply(ctx, ROUTER_METHODS.has(ctx.method) ? 'METHOD_NOT_ALLOWED' : 'NOT_IMPLEMENTED');
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
    try {
      const auth = authenticate(authorization);
      const done = auth instanceof Promise ? auth.then((a) => purchase(attempt, a)) : purchase(attempt, auth);
      if (done) return done.catch((err: unknown) => answerError(attempt, err));
    } catch (err) {
      answerError(attempt, err);
    }
  };
}
