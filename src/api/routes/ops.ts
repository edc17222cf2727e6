/** Operator routes: /healthz (process up), /readyz (Redis, PostgreSQL, Temporal reachable), /metrics, /openapi.json. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Context } from 'koa';
import { parse } from 'yaml';
import type { AppDeps } from '../deps';
import { reply } from '../errors';
import { causeOf } from '../../startup';

const CHECK_TIMEOUT_MS = 2000;

function within<T>(ms: number, work: Promise<T>): Promise<T> {
  return Promise.race([work, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms).unref())]);
}

/** The OpenAPI 3.1 document kept in the repo (openapi.yaml), parsed once. */
export const openApiDocument: unknown = parse(readFileSync(join(__dirname, '..', '..', '..', 'openapi.yaml'), 'utf8'));

/**
 * GET /readyz: 200 when Redis, PostgreSQL and the Temporal namespace answer within CHECK_TIMEOUT_MS each; else
 * 503 with Retry-After. Either way the body names each check up or down.
 */
export function readinessHandler({ redis, pool, workflows }: AppDeps) {
  const checks: Record<string, () => Promise<unknown>> = {
    redis: () => redis.ping(),
    postgres: () => pool.query('SELECT 1'),
    // Namespace-scoped, so a namespace that does not exist (every workflow start would fail) reads as down.
    temporal: () => workflows.checkNamespace(),
  };
  return async function ready(ctx: Context): Promise<void> {
    const names = Object.keys(checks);
    const results = await Promise.allSettled(names.map((name) => within(CHECK_TIMEOUT_MS, checks[name]())));
    const status = Object.fromEntries(names.map((name, i) => [name, results[i].status === 'fulfilled' ? 'up' : 'down']));
    if (results.every((r) => r.status === 'fulfilled')) {
      ctx.body = { status: 'ready', checks: status };
    } else {
      const reasons = Object.fromEntries(names.flatMap((name, i) => (results[i].status === 'rejected' ? [[name, causeOf((results[i] as PromiseRejectedResult).reason)]] : [])));
      reply(ctx, 'SERVICE_UNAVAILABLE', { checks: status, reasons });
    }
  };
}

export function metricsHandler({ metrics }: AppDeps) {
  return async function serveMetrics(ctx: Context): Promise<void> {
    ctx.type = metrics.registry.contentType;
    ctx.body = await metrics.registry.metrics();
  };
}
