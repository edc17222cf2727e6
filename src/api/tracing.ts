/**
 * The API's server span: every request under /api/ (not the sold-out answer in front of it, nor scrapes and
 * probes) runs in a span named after its route. Its parent is the caller's W3C traceparent on the routes of
 * trusted callers (the payment service's, the admin's); a buyer's traceparent is only linked to, so that no
 * buyer decides what is sampled or merges orders into one trace.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Context, Next } from 'koa';
import { tracer } from '../tracing';

/** The routes whose callers hold a service credential (payment service, admin): their traceparent is the parent. */
const TRUSTED_CALLERS = /^\/api\/(admin\/|flash-sales\/orders\/[^/]+\/payment\/?$)/i;

/**
 * Middleware, mounted only with tracing on (src/tracing/index.ts): the request in a SERVER span named by its method,
 * then by the matched route's pattern (http.route) once the router has run; a 5xx marks it an error.
 */
export function traceRequests() {
  return async function traced(ctx: Context, next: Next): Promise<void> {
    if (!ctx.path.startsWith('/api/')) return next();
    const caller = propagation.extract(ROOT_CONTEXT, ctx.req.headers);
    const callerSpan = trace.getSpanContext(caller);
    const trusted = TRUSTED_CALLERS.test(ctx.path);
    const parent = trusted ? caller : ROOT_CONTEXT;
    const attributes = { 'http.request.method': ctx.method, 'url.path': ctx.path };
    const span = tracer.startSpan(ctx.method, { kind: SpanKind.SERVER, attributes, ...(!trusted && callerSpan && { links: [{ context: callerSpan }] }) }, parent);
    try {
      await context.with(trace.setSpan(parent, span), next);
    } finally {
      const route = (ctx as { routerPath?: string }).routerPath;
      if (route) span.updateName(`${ctx.method} ${route}`).setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', ctx.status);
      if (ctx.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    }
  };
}
