/**
 * Order routes.
 * GET  /api/flash-sales/orders/{orderId}          buyer: their own order; 404 for anyone else's (I6).
 * POST /api/flash-sales/orders/{orderId}/payment  payment service: update `pay` → 200 PAID, or 409
 *      PAYMENT_WINDOW_CLOSED / ORDER_NOT_PENDING (refund), 422 AMOUNT_MISMATCH.
 * Status: PostgreSQL once the order is stored there (the workflow writes every change through it), else the
 * workflow's own search attributes (the short moment before the insert).
 */
import type { Context } from 'koa';
import { z } from 'zod';
import { isOrderId, type Payment } from '../domain';
import { findOrder, type OrderRow } from '../orders';
import type { BuyerState } from './auth';
import type { AppDeps } from './app';
import { reply } from './errors';

const PaymentBody = z.object({ paymentId: z.string().min(1).max(200), amount: z.number().int().min(0) }).strict();

function fromRow(row: OrderRow) {
  return {
    orderId: row.orderId,
    saleId: row.saleId,
    itemId: row.itemId,
    status: row.status,
    priceMinor: row.priceMinor,
    paymentDeadline: row.deadlineAt.toISOString(),
    ...(row.paymentId && { paymentId: row.paymentId }),
    ...(row.reason && { reason: row.reason }),
  };
}

/** GET handler: the buyer's own order or 404 ORDER_NOT_FOUND (unknown, malformed or someone else's). */
export function getOrderHandler({ pool, workflows }: AppDeps) {
  return async function getOrder(ctx: Context): Promise<void> {
    const { buyerId } = ctx.state as BuyerState;
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const row = await findOrder(pool, orderId);
    if (row) {
      if (row.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
      ctx.body = fromRow(row);
      return;
    }
    const order = await workflows.describe(orderId);
    if (order?.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
    ctx.body = { orderId, saleId: order.saleId, itemId: order.itemId, status: order.status };
  };
}

/** POST handler for the payment service (already authenticated by its bearer credential). */
export function paymentHandler({ pool, workflows, log }: AppDeps) {
  return async function pay(ctx: Context): Promise<void> {
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const body = PaymentBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: body.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`) });
    const payment: Payment = body.data;
    const outcome = await workflows.pay(orderId, payment);
    // Refused by the update's validator, so nothing was written to the workflow's history (I7).
    if ('refused' in outcome) return reply(ctx, outcome.refused, { orderId });
    if ('invalid' in outcome) return reply(ctx, 'INVALID_BODY', { details: [outcome.invalid] });
    if ('error' in outcome) return reply(ctx, outcome.error, { orderId });
    if ('status' in outcome) {
      log.info({ orderId, paymentId: payment.paymentId }, 'payment accepted');
      ctx.body = { orderId, status: 'PAID', paymentId: outcome.paymentId };
      return;
    }
    // The workflow has ended (or never existed): PostgreSQL holds the final word.
    const row = await findOrder(pool, orderId);
    if (!row) return reply(ctx, 'ORDER_NOT_FOUND');
    if (row.status === 'PAID' && row.paymentId === payment.paymentId) {
      ctx.body = { orderId, status: 'PAID', paymentId: row.paymentId };
      return;
    }
    return reply(ctx, row.status === 'EXPIRED' ? 'PAYMENT_WINDOW_CLOSED' : 'ORDER_NOT_PENDING', { orderId });
  };
}
