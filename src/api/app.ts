/**
 * The Koa application: middleware that each do one thing (error → JSON, body parsing, auth per route group)
 * and the router with every route. Built from injected clients so tests and `npm run api` assemble it the same
 * way.
 */
import { METHODS } from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import Koa, { type Context, type Next } from 'koa';
import { devTokensServed } from '../config';
import { isConstraintViolation } from '../db';
import type { Logger } from '../logger';
import { getSaleHandler, createSaleHandler, loadStockHandler } from './routes/admin';
import { buyerAuth, buyerAuthenticator, staticBearer, type BuyerState } from './auth';
import type { AppDeps } from './deps';
import { isUnavailable, reply, type ErrorCode } from './errors';
import { metricsHandler, openApiDocument, readinessHandler } from './routes/ops';
import { devPaymentHandler, getOrderHandler, paymentHandler, paymentMetrics } from './routes/orders';
import { purchaseHandler, purchaseMetrics, soldOutAnswer } from './routes/purchase';
import { RateLimits, replyRateLimited } from './rateLimits';
import { SaleGates } from './saleGate';
import { traceRequests } from './tracing';
import { devTokenHandler, saleAssetHandler, salePageHandler, saleViewHandler, serverTimeHandler } from './routes/saleView';


/**
 * @returns a function that answers a thrown error as JSON and returns the code it answered: known HTTP
 *   statuses keep their meaning, PostgreSQL refusing a value or a body that fails to decompress is a 400, an
 *   unreachable dependency a 503, everything else a logged 500
 */
function errorReplier(log: Logger) {
  const byStatus = new Map<number, ErrorCode>([
    [400, 'INVALID_BODY'],
    [413, 'PAYLOAD_TOO_LARGE'],
    [415, 'UNSUPPORTED_MEDIA_TYPE'],
  ]);
  const answer = (ctx: Context, err: unknown): [ErrorCode, Record<string, unknown>?] => {
    const status = (err as { status?: number }).status;
    const code = status === undefined ? undefined : byStatus.get(status);
    if (code) return [code];
    // PostgreSQL refusing a value (a NUL byte, an out-of-range date) is bad input, not a server fault.
    if (isConstraintViolation(err)) return ['INVALID_BODY', { details: [(err as Error).message] }];
    // zlib failing on a body whose Content-Encoding lies (gzip declared, garbage sent) is bad input too; so is
    // brotli failing (its codes are ERR__ERROR_*, e.g. ERR__ERROR_FORMAT_PADDING_2).
    if (/^(Z_|ERR__ERROR_)/.test(String((err as { code?: unknown }).code))) return ['INVALID_BODY', { details: ['body does not match its Content-Encoding'] }];
    if (isUnavailable(err)) {
      log.warn({ err: (err as Error).message, method: ctx.method, path: ctx.path }, 'dependency unavailable');
      return ['SERVICE_UNAVAILABLE'];
    }
    log.error({ err, method: ctx.method, path: ctx.path }, 'request failed');
    return ['INTERNAL_ERROR'];
  };
  return function replyToError(ctx: Context, err: unknown): ErrorCode {
    const [code, details] = answer(ctx, err);
    reply(ctx, code, details);
    return code;
  };
}

/** Middleware: thrown errors through replyToError, and Koa's bodiless 404/405 as JSON error codes. */
function errorsAsJson(replyToError: (ctx: Context, err: unknown) => ErrorCode) {
  return async function jsonErrors(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) reply(ctx, 'NOT_FOUND');
      if (ctx.status === 405 && !ctx.body) reply(ctx, 'METHOD_NOT_ALLOWED');
    } catch (err) {
      replyToError(ctx, err);
    }
  };
}

/** Middleware: the buyer routes' rate limit of the client IP, or of the buyer (after buyerAuth); 429 with Retry-After. */
function rateLimited(limits: RateLimits, by: 'ip' | 'buyer') {
  return async function limit(ctx: Context, next: Next): Promise<void> {
    const limited = by === 'ip' ? await limits.ip(ctx.ip) : await limits.buyer((ctx.state as BuyerState).buyerId);
    if (!limited) return next();
    replyRateLimited(ctx, limited);
  };
}

/** @returns the Koa app with every route of openapi.yaml mounted */
export async function createApp(deps: AppDeps): Promise<Koa> {
  const app = new Koa();
  // Behind a proxy that sets X-Forwarded-For, ctx.ip (the rate limits' key) is the client's, not the proxy's.
  app.proxy = deps.config.TRUST_PROXY;
  // The last X-Forwarded-For entry is the one our proxy appended; those before it are the client's to write.
  app.maxIpsCount = 1;
  const json = bodyParser({ enableTypes: ['json'], jsonLimit: '16kb', encoding: 'utf-8' });
  // A sale of up to 1,000 items (SaleInput), from the trusted admin credential, does not fit in 16 KB.
  const saleJson = bodyParser({ enableTypes: ['json'], jsonLimit: '1mb', encoding: 'utf-8' });
  const authenticate = buyerAuthenticator(deps.config, deps.log);
  const buyer = buyerAuth(authenticate);
  const admin = staticBearer(deps.config.ADMIN_TOKEN);
  const paymentService = staticBearer(deps.config.PAYMENT_SERVICE_TOKEN);
  const gates = new SaleGates(deps.config.SALE_GATE_SECRET);
  const limits = new RateLimits(deps.config);

  // Every method Node's parser accepts (TRACE, QUERY, PROPFIND…) is known to the router, so a route answers one
  // it does not serve 405 with Allow (RFC 9110 §15.5.6), never 501: the method is understood, just not here.
  const replyToError = errorReplier(deps.log);
  const router = new Router({ methods: METHODS });
  router
    .post(
      '/api/flash-sales/items/:itemId/purchase',
      purchaseMetrics(deps, replyToError),
      rateLimited(limits, 'ip'),
      buyer,
      rateLimited(limits, 'buyer'),
      purchaseHandler(deps, gates),
    )
    .get('/api/flash-sales/sales/:saleId', saleViewHandler(deps, gates))
    .get('/api/flash-sales/time', serverTimeHandler())
    .get('/api/flash-sales/orders/:orderId', rateLimited(limits, 'ip'), buyer, rateLimited(limits, 'buyer'), getOrderHandler(deps))
    .post('/api/flash-sales/orders/:orderId/payment', paymentMetrics(deps, replyToError), paymentService, json, paymentHandler(deps))
    .post('/api/admin/sales', admin, saleJson, createSaleHandler(deps))
    .get('/api/admin/sales/:saleId', admin, getSaleHandler(deps))
    .post('/api/admin/sales/:saleId/stock', admin, loadStockHandler(deps))
    .get('/healthz', (ctx) => {
      ctx.body = { status: 'ok' };
    })
    .get('/readyz', readinessHandler(deps))
    .get('/metrics', metricsHandler(deps))
    .get('/openapi.json', (ctx) => {
      ctx.body = openApiDocument;
    })
    .get('/sale/:saleId', salePageHandler())
    .get('/sale/assets/:file', saleAssetHandler());
  // Anyone may mint a buyer token here: a development convenience for the sale page, only while tokens are
  // signed with the public development secret (forgeable by anyone anyway), never with a real one.
  // The same holds for the page's development "Pay": a buyer pays their own order without a payment service.
  if (devTokensServed(deps.config)) {
    router.post('/api/dev/token', json, devTokenHandler(deps)).post('/api/dev/orders/:orderId/payment', buyer, devPaymentHandler(deps));
  }

  // The stampede's sold-out answers, before any async layer and the router's dispatch.
  app.use(soldOutAnswer(deps));
  if (deps.config.OTEL_TRACES_EXPORTER !== 'none') app.use(traceRequests());
  app.use(errorsAsJson(replyToError));
  app.use(router.routes());
  app.use(router.allowedMethods());
  return app;
}
