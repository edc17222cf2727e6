/**
 * The API's server span: every request under /api/ (not the sold-out answer in front of it, nor scrapes and
 * probes) runs in a span named after its route. On the internal door, mounted after the credential check, its
 * parent is the caller's W3C traceparent (the payment service's, the admin's); on the public door a buyer's
 * traceparent is only linked to, so that no buyer decides what is sampled or merges orders into one trace.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Context, Next } from 'koa';
import { tracer } from '../tracing';

/**
 * Middleware, mounted only with tracing on (src/tracing/index.ts): the request in a SERVER span named by its method,
 * then by the matched route's pattern (http.route) once the router has run; a 5xx marks it an error.
 * @param options.callerIsParent the caller's traceparent is the span's parent (a verified service), else a link
 */
export function traceRequests({ callerIsParent }: { callerIsParent: boolean }) {
  return async function traced(ctx: Context, next: Next): Promise<void> {
    if (!ctx.path.startsWith('/api/')) return next();
    const caller = propagation.extract(ROOT_CONTEXT, ctx.req.headers);
    const callerSpan = trace.getSpanContext(caller);
    const parent = callerIsParent ? caller : ROOT_CONTEXT;
    const attributes = { 'http.request.method': ctx.method, 'url.path': ctx.path };
    const span = tracer.startSpan(ctx.method, { kind: SpanKind.SERVER, attributes, ...(!callerIsParent && callerSpan && { links: [{ context: callerSpan }] }) }, parent);
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
