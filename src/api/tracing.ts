/**
 * The API's server span: every request under /api/ (not the sold-out answer in front of it, nor scrapes and
 * probes) runs in a span named after its route, the child of the caller's W3C traceparent when it sends one.
 */
import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Context, Next } from 'koa';
import { tracer } from '../tracing';

/**
 * Middleware, mounted only with tracing on (src/tracing.ts): the request in a SERVER span named by its method,
 * then by the matched route's pattern (http.route) once the router has run; a 5xx marks it an error.
 */
export function traceRequests() {
  return async function traced(ctx: Context, next: Next): Promise<void> {
    if (!ctx.path.startsWith('/api/')) return next();
    const parent = propagation.extract(context.active(), ctx.req.headers);
    const span = tracer.startSpan(ctx.method, { kind: SpanKind.SERVER, attributes: { 'http.request.method': ctx.method, 'url.path': ctx.path } }, parent);
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
