/**
 * Admin routes (admin bearer credential): create a sale event and load or rebuild its stock in Redis.
 * POST /api/admin/sales                      body: SaleInput → 201 sale with item ids, stock loaded
 * POST /api/admin/sales/{saleId}/stock       ?rebuild=true replaces Redis' view from PostgreSQL → 200, or 409
 *                                            REBUILD_REFUSED while Redis still holds the stock (&force=true overrides)
 * GET  /api/admin/sales/{saleId}             sale, items, and each item's Redis stock → 200
 */
import type { Context } from 'koa';
import { parseId } from '../domain';
import { createSale, findSale, loadSale, RebuildRefused, SaleInput, type Sale } from '../sales';
import type { AppDeps } from './app';
import { reply } from './errors';

async function withStock(deps: AppDeps, sale: Sale) {
  const stock = await deps.store.stock(
    sale.saleId,
    sale.items.map((i) => i.itemId),
  );
  return { ...sale, items: sale.items.map((i) => ({ ...i, stock: stock.get(i.itemId) ?? null })) };
}

export function createSaleHandler(deps: AppDeps) {
  return async function create(ctx: Context): Promise<void> {
    const input = SaleInput.safeParse(ctx.request.body);
    if (!input.success) return reply(ctx, 'INVALID_BODY', { details: input.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`) });
    const sale = await createSale(deps.pool, input.data);
    await loadSale(deps.pool, deps.store, sale.saleId, false);
    deps.log.info({ saleId: sale.saleId, items: sale.items.length }, 'sale created');
    ctx.status = 201;
    ctx.body = await withStock(deps, sale);
  };
}

export function loadStockHandler(deps: AppDeps) {
  return async function load(ctx: Context): Promise<void> {
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    const rebuild = ctx.query.rebuild === 'true';
    let sale;
    try {
      sale = await loadSale(deps.pool, deps.store, saleId, rebuild, ctx.query.force === 'true');
    } catch (err) {
      if (err instanceof RebuildRefused) return reply(ctx, 'REBUILD_REFUSED', { details: [err.message] });
      throw err;
    }
    if (!sale) return reply(ctx, 'SALE_NOT_FOUND');
    deps.log.warn({ saleId, rebuild }, 'sale stock loaded');
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
