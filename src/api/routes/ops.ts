/** Operator routes: /healthz (process up), /readyz (Redis, PostgreSQL, Temporal reachable), /metrics, /openapi.json. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Context } from 'koa';
import { parse } from 'yaml';
import type { AppDeps, DependencyStatus } from '../deps';
import { reply } from '../errors';
import { causeOf } from '../../infra/startup';

const CHECK_TIMEOUT_MS = 2000;

function within<T>(ms: number, work: Promise<T>): Promise<T> {
  return Promise.race([work, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms).unref())]);
}

/** The OpenAPI 3.1 document kept in the repo (openapi.yaml), parsed once. */
export const openApiDocument = parse(readFileSync(join(__dirname, '..', '..', '..', 'openapi.yaml'), 'utf8')) as { paths: Record<string, { 'x-door'?: string }> };

/**
 * What the public door shows of the contract: the document without the paths marked `x-door` (internal, or
 * development), so that it maps no route a stranger cannot use.
 */
export const publicOpenApiDocument = {
  ...openApiDocument,
  paths: Object.fromEntries(Object.entries(openApiDocument.paths).filter(([, item]) => item['x-door'] === undefined)),
};


/**
 * @returns a check of Redis, PostgreSQL and the Temporal namespace, each answering within CHECK_TIMEOUT_MS or
 *   down; run on a timer (src/api/polled.ts), whose last result /readyz and the flash_sale_dependency_up gauge read
 */
export function dependencyChecks({ redis, pool, workflows }: Pick<AppDeps, 'redis' | 'pool' | 'workflows'>): () => Promise<DependencyStatus> {
  const checks = {
    redis: () => redis.ping(),
    postgres: () => pool.query('SELECT 1'),
    // Namespace-scoped, so a namespace that does not exist (every workflow start would fail) reads as down.
    temporal: () => workflows.checkNamespace(),
  };
  const names = Object.keys(checks) as (keyof typeof checks)[];
  return async () => {
    const results = await Promise.allSettled(names.map((name) => within(CHECK_TIMEOUT_MS, checks[name]() as Promise<unknown>)));
    return Object.fromEntries(
      names.map((name, i) => {
        const result = results[i];
        return [name, result.status === 'fulfilled' ? { up: true } : { up: false, reason: causeOf(result.reason) }];
      }),
    ) as DependencyStatus;
  };
}

/**
 * GET /readyz: 200 when Redis, PostgreSQL and the Temporal namespace answered within CHECK_TIMEOUT_MS each at the
 * last check (deps.dependencies: on a timer, not per request); else 503 with Retry-After. Either way the body
 * names each check up or down.
 */
export function readinessHandler({ dependencies }: Pick<AppDeps, 'dependencies'>) {
  return async function ready(ctx: Context): Promise<void> {
    const results = Object.entries(await dependencies());
    const status = Object.fromEntries(results.map(([name, r]) => [name, r.up ? 'up' : 'down']));
    if (results.every(([, r]) => r.up)) {
      ctx.body = { status: 'ready', checks: status };
    } else {
      const reasons = Object.fromEntries(results.flatMap(([name, r]) => (r.up ? [] : [[name, r.reason]])));
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
