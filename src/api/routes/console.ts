/**
 * The operators' console (internal door; docs/operations.md, "The console"): a page per sale, served by the API
 * itself, and the live figures it reads every second (GET /api/admin/sales/{saleId}/live, admin credential). Its
 * controls are the admin routes (pause, resume, end, cancel an order), each asked for with a confirmation.
 */
import type { Context } from 'koa';
import { parseId } from '../../order/ids';
import type { OrderStatus } from '../../order/types';
import { closedMarks } from '../../reservation/closing';
import { StartQueue } from '../../reservation/startQueue';
import { findSale } from '../../sale/sales';
import type { AppDeps } from '../deps';
import { reply } from '../errors';
import { assetHandler, pageHandler } from '../webFiles';

/** How far back the drain rate looks, s. */
const DRAIN_WINDOW_S = 10;
// The console runs its own script and style sheet only, in no one else's frame; it holds the admin token in its
// tab's session storage, so nothing of it may be cached or sent elsewhere.
const CONSOLE_HEADERS = {
  'Cache-Control': 'no-store',
  'X-Content-Type-Options': 'nosniff',
  'Content-Security-Policy': "default-src 'self'; frame-ancestors 'none'",
  'Referrer-Policy': 'no-referrer',
};
const CONSOLE_FILES: Record<string, string> = {
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

/** GET /console/sales/{saleId}: the console page, the same for every sale (its script reads the id from the path). */
export const consolePageHandler = () => pageHandler('console.html', CONSOLE_HEADERS);

/** GET /console/assets/{file}: the console's script and style sheet. */
export const consoleAssetHandler = () => assetHandler(CONSOLE_FILES, CONSOLE_HEADERS);

/** @returns a counter's or a histogram count's values by their `code` label (this process's) */
async function byCode(metric: { get(): Promise<{ values: { labels: Record<string, string | number>; value: number; metricName?: string }[] }> }): Promise<Record<string, number>> {
  const { values } = await metric.get();
  const counts = values.filter((v) => v.metricName === undefined || v.metricName.endsWith('_count'));
  return Object.fromEntries(counts.map((v) => [String(v.labels.code), v.value]));
}

/**
 * GET handler: the sale's live figures, read now. From the stores (every process's work): the state, each item's
 * free units per stock shard, orders by state and those accepted but not stored yet (the start queue), the
 * drain (orders stored in the last DRAIN_WINDOW_S), payments stored; from this API process's own metrics: its
 * answers to presses and to the payment route, by code.
 */
export function saleLiveHandler(deps: AppDeps) {
  const queue = new StartQueue(deps.store.redis, deps.store.layouts);
  return async function live(ctx: Context): Promise<void> {
    ctx.set('Cache-Control', 'no-store');
    const saleId = parseId(ctx.params.saleId);
    if (saleId === undefined) return reply(ctx, 'INVALID_SALE_ID');
    const sale = await findSale(deps.pool, saleId);
    if (!sale) return reply(ctx, 'SALE_NOT_FOUND');
    const now = Date.now();
    const [free, marks, startQueue, orders, payments] = await Promise.all([
      deps.store.view.stockByShard(saleId, sale.items.map((i) => i.itemId)),
      closedMarks(deps.store, saleId),
      queue.depth(saleId, now),
      deps.pool.query<{ status: OrderStatus; count: number; recent: number }>(
        `SELECT status, count(*)::int AS count, count(*) FILTER (WHERE created_at > now() - make_interval(secs => $2))::int AS recent
         FROM orders WHERE sale_id = $1 GROUP BY status`,
        [saleId, DRAIN_WINDOW_S],
      ),
      deps.pool.query<{ count: number }>('SELECT count(*)::int AS count FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.sale_id = $1', [saleId]),
    ]);
    const stored = orders.rows.reduce((n, r) => n + r.recent, 0);
    ctx.body = {
      saleId,
      name: sale.name,
      state: marks.includes('ENDED') ? 'ENDED' : marks.includes('PAUSED') ? 'PAUSED' : 'OPEN',
      shardMarks: marks.map((m) => m ?? 'OPEN'),
      startsAt: sale.startsAt.toISOString(),
      endsAt: sale.endsAt.toISOString(),
      at: new Date(now).toISOString(),
      items: sale.items.map((i) => ({ itemId: i.itemId, name: i.name, quantity: i.quantity, live: i.sold, freeByShard: (free.get(i.itemId) ?? []).map((n) => n ?? null) })),
      orders: Object.fromEntries(orders.rows.map((r) => [r.status, r.count])),
      startQueue,
      drain: { storedLastS: DRAIN_WINDOW_S, stored, perSecond: stored / DRAIN_WINDOW_S },
      payments: { stored: payments.rows[0].count, thisProcessRoute: await byCode(deps.metrics.paymentDuration) },
      presses: { thisProcess: await byCode(deps.metrics.purchaseOutcomes) },
    };
  };
}
