/**
 * What a buyer's browser needs before it buys, without a token (openapi.yaml): the public sale view (cached per
 * process, saleViews.ts; `Cache-Control: public, max-age=1` and a weak ETag for a CDN; the gate from the sale's
 * start), the server's clock, the sale page (src/web/), and in development a buyer token for its sign-in.
 */
import type { Context } from 'koa';
import { z } from 'zod';
import { BUYER_ID, parseId } from '../../order/ids';
import { closedMarks } from '../../reservation/closing';
import { signBuyerToken } from '../devTokens';
import type { AppDeps } from '../deps';
import { issuesOf, reply } from '../errors';
import type { SaleGates } from '../saleGate';
import { SaleViews } from '../saleViews';
import { assetHandler, pageHandler } from '../webFiles';

/** Seconds a CDN or browser may reuse the view: with the process's cache (≤ 1 s), the page's sold-out marks lag the truth by at most twice this. */
const SALE_VIEW_MAX_AGE_S = 1;
const DEV_TOKEN_LIFETIME_S = 3600;

/**
 * GET /api/flash-sales/sales/{saleId}: 200 the view (SaleView in openapi.yaml) from this process's cache
 * (saleViews.ts), 304 on a matching If-None-Match, 400 INVALID_SALE_ID, 404 SALE_NOT_FOUND. The gate, the
 * headers and serverTime are the request's, by its own clock. @throws pg or ioredis errors (→ 503) when a read
 * was due and a store is away
 */
export function saleViewHandler(deps: AppDeps, gates: SaleGates) {
  const views = new SaleViews(deps.pool, deps.store.view, (saleId) => closedMarks(deps.store, saleId), gates);
  return async function view(ctx: Context): Promise<void> {
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    const sale = await views.get(saleId);
    if (!sale) return reply(ctx, 'SALE_NOT_FOUND');
    const now = Date.now();
    const open = now >= sale.startsAtMs && now < sale.endsAtMs;
    const shown = open ? sale.open : sale.closed;
    // A copy cached across the start would hide the gate from the first buyers: no caching in the last second.
    const maxAgeS = !open && sale.startsAtMs - now < SALE_VIEW_MAX_AGE_S * 1000 ? 0 : SALE_VIEW_MAX_AGE_S;
    ctx.set('Cache-Control', `public, max-age=${maxAgeS}`);
    ctx.etag = shown.etag;
    ctx.status = 200;
    if (ctx.fresh) {
      ctx.status = 304;
      return;
    }
    ctx.type = 'application/json';
    // The cached JSON with serverTime last, as JSON.stringify({ ...content, serverTime }) writes it.
    ctx.body = `${shown.json.slice(0, -1)},"serverTime":"${new Date(now).toISOString()}"}`;
  };
}

/** GET /api/flash-sales/time: `{ serverTime }`, no I/O, `Cache-Control: no-store`. */
export function serverTimeHandler() {
  return function time(ctx: Context): void {
    ctx.set('Cache-Control', 'no-store');
    ctx.body = { serverTime: new Date().toISOString() };
  };
}

// The page runs its own script and style sheet only, and in no one else's frame.
const PAGE_HEADERS = {
  'Cache-Control': 'public, max-age=60',
  'X-Content-Type-Options': 'nosniff',
  'Content-Security-Policy': "default-src 'self'; frame-ancestors 'none'",
  // Served over TLS by the edge in production: browsers then keep to https; no URL leaks to other sites.
  'Strict-Transport-Security': 'max-age=31536000',
  'Referrer-Policy': 'no-referrer',
};
const SCRIPT = 'text/javascript; charset=utf-8';
const PAGE_FILES: Record<string, string> = {
  'sale.js': SCRIPT,
  'page.js': SCRIPT,
  'format.js': SCRIPT,
  'render.js': SCRIPT,
  'order.js': SCRIPT,
  'sale.css': 'text/css; charset=utf-8',
};

/** GET /sale/{saleId}: the page, the same for every sale (its script reads the id from the path). */
export const salePageHandler = () => pageHandler('sale.html', PAGE_HEADERS);

/** GET /sale/assets/{file}: the page's script modules and style sheet. */
export const saleAssetHandler = () => assetHandler(PAGE_FILES, PAGE_HEADERS);

const DevTokenBody = z.object({ buyerId: z.string().regex(BUYER_ID, 'a buyer id: letters, digits and _.@:- up to 128') }).strict();

/** POST /api/dev/token: 200 `{ token, expiresInS }` for a valid buyer id (BUYER_ID), else 400 INVALID_BODY. */
export function devTokenHandler(deps: AppDeps) {
  return function devToken(ctx: Context): void {
    const body = DevTokenBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: issuesOf(body.error) });
    ctx.body = { token: signBuyerToken(deps.config, body.data.buyerId, DEV_TOKEN_LIFETIME_S), expiresInS: DEV_TOKEN_LIFETIME_S };
  };
}
