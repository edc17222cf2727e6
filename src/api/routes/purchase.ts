/**
 * POST /api/flash-sales/items/{itemId}/purchase, the front door of the stampede: soldOutAnswer before the router,
 * then metrics → rate limit (client) → buyerAuth → rate limit (buyer) → purchase. 202 once Redis holds the
 * reservation and its start queue entry (the workflow starts afterwards: no purchase waits for Temporal, I4);
 * 409 with the buyer's own order; 410; every other answer changes nothing (I7).
 */
import type { Context, Next } from 'koa';
import { parseId } from '../../order/ids';
import { newOrderId } from '../../order/orderId';
import { paymentDeadlineMs } from '../../order/types';
import { hasBearerJwt } from '../auth';
import type { AppDeps } from '../deps';
import { PAUSED_RETRY_AFTER_S, reply, type AnsweredState, type ErrorCode } from '../errors';
import { SALE_GATE_HEADER, type SaleGates } from '../saleGate';
import { activeTraceParent, ATTR, inSpan } from '../../tracing';

/** What the purchase middlewares leave for purchaseMetrics: the answer's code ('PENDING' for a 202) and the buyer. */
type PurchaseState = AnsweredState & { buyerId?: string };

/**
 * Middleware: counts every purchase answer of a verified buyer under its code, with its latency (an answer
 * before the buyer is known, a refused token or the client's rate limit, goes to the unauthenticated count
 * instead; SOLD_OUT is the same for all and counted as such), and answers what the route throws as the app does (replyToError). SOLD_OUT answers
 * go through the metrics' batch: they are most of the stampede.
 */
export function purchaseMetrics({ metrics, log }: Pick<AppDeps, 'metrics' | 'log'>, replyToError: (ctx: Context, err: unknown) => ErrorCode) {
  const debug = log.isLevelEnabled('debug');
  return async function countPurchase(ctx: Context, next: Next): Promise<void> {
    const startedAt = performance.now();
    try {
      await next();
    } catch (err) {
      replyToError(ctx, err);
    }
    const { outcome: code = 'INTERNAL_ERROR', buyerId } = ctx.state as PurchaseState;
    const seconds = (performance.now() - startedAt) / 1000;
    if (buyerId === undefined && code !== 'SOLD_OUT') {
      metrics.unauthenticated.labels('purchase', code).inc();
    } else if (code === 'SOLD_OUT') {
      metrics.recordSoldOut(seconds);
    } else {
      metrics.purchaseOutcomes.labels(code).inc();
      metrics.purchaseDuration.labels(code).observe(seconds);
    }
    if (debug) log.debug({ code, itemId: ctx.params.itemId, userId: buyerId, orderId: (ctx.body as { orderId?: unknown } | undefined)?.orderId }, 'purchase');
  };
}

/** The purchase route's path as @koa/router matches it: letter case ignored, one trailing slash allowed. */
const PURCHASE_PATH = /^\/api\/flash-sales\/items\/([^/]+)\/purchase\/?$/i;

/** Decodes a path segment as @koa/router does (`%31` → `1`); a malformed escape stays as it is (→ 400 later). */
function segment(raw: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * Middleware in front of the router: 410 SOLD_OUT for a purchase of an item this process holds as sold out, as
 * soon as the request carries a bearer token shaped like a JWT, before the token is verified: the answer is
 * the same for every buyer and acts for no one (I6, I7), and the check would cost more than the whole answer.
 * Most of a stampede ends here, synchronously, before the router's dispatch (docs/performance.md has the
 * same-run figures). Anything else goes on to the router.
 */
export function soldOutAnswer({ soldOut, metrics }: Pick<AppDeps, 'soldOut' | 'metrics'>) {
  return function answerSoldOut(ctx: Context, next: Next): void | Promise<void> {
    if (ctx.method !== 'POST') return next();
    const startedAt = performance.now();
    const match = PURCHASE_PATH.exec(ctx.path);
    const itemId = match ? parseId(segment(match[1])) : undefined;
    if (itemId === undefined || !soldOut.has(itemId) || !hasBearerJwt(ctx.req.headers.authorization)) return next();
    reply(ctx, 'SOLD_OUT');
    metrics.recordSoldOut((performance.now() - startedAt) / 1000);
  };
}

/**
 * Handler, after the buyer is verified (ctx.state.buyerId): the item, the sale's window and gate, then the
 * reservation in Redis (reserve.lua) and its answer.
 */
export function purchaseHandler({ catalog, store, soldOut, starter, metrics, log, config }: AppDeps, gates: SaleGates) {
  return async function purchase(ctx: Context): Promise<void> {
    const state = ctx.state as PurchaseState;
    const itemId = parseId(ctx.params.itemId);
    if (itemId === undefined) return reply(ctx, 'INVALID_ITEM_ID');
    if (soldOut.has(itemId)) return reply(ctx, 'SOLD_OUT');
    const item = await catalog.get(itemId);
    if (!item) return reply(ctx, 'ITEM_NOT_FOUND');
    const now = Date.now();
    if (now < item.startsAtMs || now >= item.endsAtMs) return reply(ctx, 'SALE_NOT_ACTIVE');
    if (config.SALE_GATE_REQUIRED && !gates.admits(item.saleId, ctx.req.headers[SALE_GATE_HEADER])) return reply(ctx, 'SALE_GATE_INVALID');

    const buyerId = state.buyerId as string;
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
      outcome = await inSpan('reserve', { attributes: { [ATTR.orderId]: order.orderId, [ATTR.saleId]: item.saleId, [ATTR.itemId]: itemId } }, async (span) => {
        // The start queue entry carries the reservation's span, so the order's start joins the buyer's trace.
        const result = await store.reserve(order, activeTraceParent());
        span.setAttribute(ATTR.outcome, result.kind);
        return result;
      });
    } catch (err) {
      log.warn({ err, itemId, userId: buyerId }, 'redis unavailable for reserve');
      return reply(ctx, 'SERVICE_UNAVAILABLE');
    }
    switch (outcome.kind) {
      case 'ALREADY_PURCHASED':
        return reply(ctx, 'ALREADY_PURCHASED', { orderId: outcome.orderId });
      case 'SOLD_OUT':
        soldOut.flag(item.saleId, itemId);
        return reply(ctx, 'SOLD_OUT');
      case 'NOT_LOADED':
        log.error({ itemId, saleId: item.saleId }, 'stock not loaded in redis: run `npm run sale -- load`, or `load --rebuild` after a loss of its data');
        return reply(ctx, 'STOCK_NOT_LOADED');
      case 'NOT_REPLICATED':
        // The reservation and its queue entry exist on the master: the order is the starter's like any other and
        // ends, and the buyer's retry answers 409 with its id. Only the promise that a failover keeps it is
        // missing, so the answer is a 503 that names the order and its deadline.
        log.warn({ itemId, orderId: outcome.orderId, replicas: outcome.replicas }, 'reservation not on enough replicas in time');
        starter.notice(item.saleId);
        return reply(ctx, 'RESERVATION_NOT_REPLICATED', { orderId: order.orderId, paymentDeadline: new Date(paymentDeadlineMs(order)).toISOString() });
      case 'UNDECIDED':
        // Units came back to shards the buyer had already looked at, on every pass: no answer is true yet.
        return reply(ctx, 'SERVICE_UNAVAILABLE');
      case 'CLOSED':
        // An operator's control (src/sale/controls.ts): paused comes back, ended does not.
        if (outcome.state === 'ENDED') return reply(ctx, 'SALE_NOT_ACTIVE');
        reply(ctx, 'SALE_PAUSED');
        return void ctx.set('Retry-After', String(PAUSED_RETRY_AFTER_S));
    }
    metrics.reservations.inc();
    // The last unit of a one-shard item: sold out. A sharded item's other shards may hold units still; its
    // flag waits for the SOLD_OUT that finds every shard empty.
    if (outcome.stockLeft === 0 && item.stockShards === 1) soldOut.flag(item.saleId, itemId);
    // The reservation and its start queue entry are in Redis: the order is accepted, its workflow is the
    // starter's to start (I4). This process's starter is told, so the start does not wait for its next poll.
    starter.notice(item.saleId);
    ctx.status = 202;
    ctx.body = { orderId: order.orderId, status: 'PENDING', paymentDeadline: new Date(paymentDeadlineMs(order)).toISOString() };
    state.outcome = 'PENDING';
  };
}
