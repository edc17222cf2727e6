/**
 * The Koa applications of the API's two doors (design: Safe as shipped): the public one, for buyers and the
 * sale page, and the internal one (admin, payments, metrics, readiness), on a listener a deployment does not
 * expose. Middleware that each do one thing (error → JSON, body parsing, auth per route group) and a router per
 * door. Built from injected clients so tests and `npm run api` assemble them the same way.
 */
import { METHODS } from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import Koa, { type Context, type Next } from 'koa';
import { devTokensServed } from '../config';
import { isConstraintViolation } from '../infra/db';
import type { Logger } from '../infra/logger';
import { getSaleHandler, createSaleHandler, loadStockHandler, saleControlHandler } from './routes/admin';
import { buyerAuth, buyerAuthenticator, type BuyerState } from './auth';
import { staticBearer, type CredentialGuard } from './serviceAuth';
import { clientKeyOf } from './clientAddress';
import type { AppDeps } from './deps';
import { isUnavailable, reply, type ErrorCode } from './errors';
import { metricsHandler, openApiDocument, publicOpenApiDocument, readinessHandler } from './routes/ops';
import { devPaymentHandler, getOrderHandler, paymentHandler, paymentMetrics, paymentOrderHandler } from './routes/orders';
import { buyerCancelHandler, operatorCancelHandler, paymentFailureHandler } from './routes/cancel';
import { consoleAssetHandler, consolePageHandler, saleLiveHandler } from './routes/console';
import { purchaseHandler, purchaseMetrics, soldOutAnswer } from './routes/purchase';
import { RateLimits, replyRateLimited, type Limited } from './rateLimits';
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

/** Middleware: a rate limit of the client (clientKeyOf), or of the buyer (after buyerAuth); 429 with Retry-After. */
function rateLimited(limit: (ctx: Context) => Promise<Limited>) {
  return async function limited(ctx: Context, next: Next): Promise<void> {
    const refused = await limit(ctx);
    if (!refused) return next();
    replyRateLimited(ctx, refused);
  };
}

/** Middleware: every answer tells browsers not to guess its type (JSON read as HTML). */
async function noSniff(ctx: Context, next: Next): Promise<void> {
  ctx.set('X-Content-Type-Options', 'nosniff');
  await next();
}

/** An internal-door credential's guard: refusals counted per credential, and too many from one client blocked. */
function credentialGuard(deps: AppDeps, limits: RateLimits, clientKey: ReturnType<typeof clientKeyOf>, credential: 'admin' | 'payment'): CredentialGuard {
  return {
    blocked: (ctx) => limits.credentialsBlocked(clientKey(ctx.req)),
    async failed(ctx, code) {
      deps.metrics.credentialFailures.labels(credential, code).inc();
      if (code !== 'RATE_LIMITED') await limits.credentialFailed(clientKey(ctx.req));
    },
  };
}

/** A route that answers a fixed JSON document (the contract). */
const serve = (document: object) => (ctx: Context) => {
  ctx.body = document;
};

/** The API's two listeners' applications: what buyers may reach, and what only the house may. */
export interface Apps {
  /** Buyers' routes, the sale view and page, the clock, /healthz and the public contract (and development routes). */
  public: Koa;
  /** Payments, admin, /readyz, /metrics, /healthz and the whole contract. */
  internal: Koa;
}

/** @returns the two applications, with every route of openapi.yaml mounted on one of them */
export async function createApps(deps: AppDeps): Promise<Apps> {
  const json = bodyParser({ enableTypes: ['json'], jsonLimit: '16kb', encoding: 'utf-8' });
  // A sale of up to 1,000 items (SaleInput), from the trusted admin credential, does not fit in 16 KB.
  const saleJson = bodyParser({ enableTypes: ['json'], jsonLimit: '1mb', encoding: 'utf-8' });
  const authenticate = buyerAuthenticator(deps.config, deps.log);
  const buyer = buyerAuth(authenticate);
  const gates = new SaleGates(deps.config.SALE_GATE_SECRET);
  const limits = new RateLimits(deps.config);
  const clientKey = clientKeyOf(deps.config.TRUST_PROXY);
  const byClient = rateLimited((ctx) => limits.ip(clientKey(ctx.req)));
  const byBuyer = rateLimited((ctx) => limits.buyer((ctx.state as BuyerState).buyerId));
  const reads = rateLimited((ctx) => limits.read(clientKey(ctx.req)));
  const admin = staticBearer(deps.config.ADMIN_TOKEN, credentialGuard(deps, limits, clientKey, 'admin'));
  const paymentService = staticBearer(deps.config.PAYMENT_SERVICE_TOKEN, credentialGuard(deps, limits, clientKey, 'payment'));
  const tracing = deps.config.OTEL_TRACES_EXPORTER !== 'none';
  // A service's traceparent is its span's parent only once its credential is verified: before, a stranger could
  // force sampling or write spans into a chosen trace.
  const traced = tracing ? traceRequests({ callerIsParent: true }) : passOn;

  // Every method Node's parser accepts (TRACE, QUERY, PROPFIND…) is known to the router, so a route answers one
  // it does not serve 405 with Allow (RFC 9110 §15.5.6), never 501: the method is understood, just not here.
  const replyToError = errorReplier(deps.log);
  const publicRouter = new Router({ methods: METHODS });
  publicRouter
    .post('/api/flash-sales/items/:itemId/purchase', purchaseMetrics(deps, replyToError), byClient, buyer, byBuyer, purchaseHandler(deps, gates))
    .get('/api/flash-sales/sales/:saleId', reads, saleViewHandler(deps, gates))
    .get('/api/flash-sales/time', reads, serverTimeHandler())
    .get('/api/flash-sales/orders/:orderId', byClient, buyer, byBuyer, getOrderHandler(deps))
    .post('/api/flash-sales/orders/:orderId/cancel', byClient, buyer, byBuyer, buyerCancelHandler(deps))
    .get('/healthz', healthHandler)
    .get('/openapi.json', serve(publicOpenApiDocument))
    .get('/sale/:saleId', reads, salePageHandler())
    .get('/sale/assets/:file', saleAssetHandler());
  // Anyone may mint a buyer token here: a development convenience for the sale page, only while tokens are
  // signed with the public development secret (forgeable by anyone anyway), never with a real one.
  // The same holds for the page's development "Pay": a buyer pays their own order without a payment service.
  if (devTokensServed(deps.config)) {
    publicRouter.post('/api/dev/token', json, devTokenHandler(deps)).post('/api/dev/orders/:orderId/payment', buyer, devPaymentHandler(deps));
  }

  const internalRouter = new Router({ methods: METHODS });
  internalRouter
    .get('/api/flash-sales/orders/:orderId/payment', paymentService, paymentOrderHandler(deps))
    .post('/api/flash-sales/orders/:orderId/payment', paymentMetrics(deps, replyToError), paymentService, traced, json, paymentHandler(deps))
    .post('/api/flash-sales/orders/:orderId/payment-failure', paymentService, traced, json, paymentFailureHandler(deps))
    .post('/api/admin/orders/:orderId/cancel', admin, traced, json, operatorCancelHandler(deps))
    .post('/api/admin/sales', admin, traced, saleJson, createSaleHandler(deps))
    .get('/api/admin/sales/:saleId', admin, traced, getSaleHandler(deps))
    .post('/api/admin/sales/:saleId/stock', admin, traced, loadStockHandler(deps))
    .post('/api/admin/sales/:saleId/pause', admin, traced, saleControlHandler(deps, 'pause'))
    .post('/api/admin/sales/:saleId/resume', admin, traced, saleControlHandler(deps, 'resume'))
    .post('/api/admin/sales/:saleId/end', admin, traced, saleControlHandler(deps, 'end'))
    .get('/api/admin/sales/:saleId/live', admin, saleLiveHandler(deps))
    .get('/console/sales/:saleId', consolePageHandler())
    .get('/console/assets/:file', consoleAssetHandler())
    .get('/healthz', healthHandler)
    .get('/readyz', readinessHandler(deps))
    .get('/metrics', metricsHandler(deps))
    .get('/openapi.json', serve(openApiDocument));

  const publicApp = new Koa();
  // The stampede's sold-out answers, before any async layer and the router's dispatch.
  publicApp.use(soldOutAnswer(deps));
  // A buyer's traceparent is only ever a link (src/api/tracing.ts).
  if (tracing) publicApp.use(traceRequests({ callerIsParent: false }));
  const internalApp = new Koa();
  for (const [app, router] of [
    [publicApp, publicRouter],
    [internalApp, internalRouter],
  ] as const) {
    app.use(noSniff);
    app.use(errorsAsJson(replyToError));
    app.use(router.routes());
    app.use(router.allowedMethods());
  }
  return { public: publicApp, internal: internalApp };
}

function healthHandler(ctx: Context): void {
  ctx.body = { status: 'ok' };
}

function passOn(_ctx: Context, next: Next): Promise<void> {
  return next();
}
