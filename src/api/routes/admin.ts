/**
 * Admin routes (admin bearer credential; openapi.yaml): create a sale and load its stock; load or rebuild a sale's
 * stock (REBUILD_NEEDED when a shard lost its data, `?rebuild=true` restores it, `&force=true` when others kept
 * theirs); read a sale with each item's Redis stock; pause, resume or end a sale (src/sale/controls.ts).
 */
import { LayoutError } from '../../reservation/layout';
import type { Context } from 'koa';
import { parseId } from '../../order/ids';
import { MarkNotReplicated } from '../../reservation/closing';
import { controlSale, SaleEnded, type SaleControl } from '../../sale/controls';
import { createSale, findSale, loadSale, RebuildNeeded, RebuildRefused, SaleInput, type Sale } from '../../sale/sales';
import type { AppDeps } from '../deps';
import { issuesOf, reply } from '../errors';
import { shardPlacer, sharedMasters } from '../../reservation/placement';

async function withStock(deps: AppDeps, sale: Sale) {
  const stock = await deps.store.view.stock(
    sale.saleId,
    sale.items.map((i) => i.itemId),
  );
  return { ...sale, items: sale.items.map((i) => ({ ...i, stock: stock.get(i.itemId) ?? null })) };
}

export function createSaleHandler(deps: AppDeps) {
  return async function create(ctx: Context): Promise<void> {
    const input = SaleInput.safeParse(ctx.request.body);
    if (!input.success) {
      const details = issuesOf(input.error);
      // Only the rules between fields left (refinements, which openapi.yaml's schema cannot state): the body
      // has the documented shape and breaks a rule of the sale, 422; any shape fault is 400.
      return reply(ctx, input.error.issues.every((i) => i.code === 'custom') ? 'INVALID_SALE' : 'INVALID_BODY', { details });
    }
    let sale;
    try {
      sale = await createSale(deps.pool, input.data, shardPlacer(deps.store.redis));
    } catch (err) {
      // More stock shards than the cluster has masters: nothing was stored.
      if (err instanceof LayoutError) return reply(ctx, 'INVALID_SALE', { details: [`items: ${err.message}`] });
      throw err;
    }
    await loadSale(deps.pool, deps.store, sale.saleId, false);
    deps.log.info({ saleId: sale.saleId, items: sale.items.length }, 'sale created');
    ctx.status = 201;
    ctx.body = await withStock(deps, sale);
  };
}

/**
 * Reads a boolean query flag: absent is false, 'true' or 'false' as written.
 * @returns the value, or undefined for anything else (another spelling, or the flag given twice)
 */
function flag(value: string | string[] | undefined): boolean | undefined {
  if (value === undefined || value === 'false') return false;
  return value === 'true' ? true : undefined;
}

export function loadStockHandler(deps: AppDeps) {
  return async function load(ctx: Context): Promise<void> {
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    const rebuild = flag(ctx.query.rebuild);
    const force = flag(ctx.query.force);
    // A flag misspelled must not be read as false and load anyway (I7).
    if (rebuild === undefined || force === undefined) {
      return reply(ctx, 'INVALID_QUERY', { details: ['rebuild and force are "true" or "false", given at most once'] });
    }
    let sale;
    try {
      sale = await loadSale(deps.pool, deps.store, saleId, rebuild, force);
    } catch (err) {
      if (err instanceof RebuildRefused) return reply(ctx, 'REBUILD_REFUSED', { details: [err.message] });
      if (err instanceof RebuildNeeded) return reply(ctx, 'REBUILD_NEEDED', { details: [err.message] });
      throw err;
    }
    if (!sale) return reply(ctx, 'SALE_NOT_FOUND');
    deps.log.warn({ saleId, rebuild }, 'sale stock loaded');
    const shared = await sharedMasters(deps.store.redis, deps.store.layouts, saleId);
    if (shared.length) deps.log.warn({ saleId, shared }, 'stock shards share a master (slots moved since the sale was made): they no longer spread its load');
    ctx.body = await withStock(deps, sale);
  };
}

export function getSaleHandler(deps: AppDeps) {
  return async function get(ctx: Context): Promise<void> {
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    const sale = await findSale(deps.pool, saleId);
    if (!sale) return reply(ctx, 'SALE_NOT_FOUND');
    ctx.body = await withStock(deps, sale);
  };
}

/**
 * POST handler of a sale control: 200 `{saleId, state, changed}` once every stock shard holds the state (no
 * purchase is reserved after this answer), 409 SALE_ENDED for pause or resume of an ended sale, 404 SALE_NOT_FOUND.
 */
export function saleControlHandler(deps: AppDeps, control: SaleControl) {
  return async function controlled(ctx: Context): Promise<void> {
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    let result;
    try {
      result = await controlSale(deps.pool, deps.store, saleId, control);
    } catch (err) {
      if (err instanceof SaleEnded) return reply(ctx, 'SALE_ENDED', { details: [err.message] });
      if (err instanceof MarkNotReplicated) return reply(ctx, 'SERVICE_UNAVAILABLE', { details: [err.message] });
      throw err;
    }
    if (!result) return reply(ctx, 'SALE_NOT_FOUND');
    deps.log.warn({ saleId, control, ...result }, 'sale control applied');
    ctx.body = { saleId, ...result };
  };
}
