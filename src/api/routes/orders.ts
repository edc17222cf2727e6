/**
 * Order routes.
 * GET  /api/flash-sales/orders/{orderId}          buyer: their own order; 404 for anyone else's (I6).
 * POST /api/flash-sales/orders/{orderId}/payment  payment service: 200 PAID, or 409 PAYMENT_WINDOW_CLOSED /
 *      ORDER_NOT_PENDING (refund), 422 AMOUNT_MISMATCH; decided in PostgreSQL, from the 202 on.
 * Status: PostgreSQL once the order is stored there (the workflow writes every change through it), else its
 * reservation in Redis: from the 202 until its workflow stores it, the order is PENDING there (I4).
 */
import type { Context } from 'koa';
import { z } from 'zod';
import { isOrderId, PAYMENT_ID, type Payment } from '../../order/types';
import { saleOfOrder } from '../../order/id';
import { findOrder, payOrder, persistOrder, storePaidOrder, type OrderRow } from '../../order/store';
import type { Reservation } from '../../reservation/store';
import type { BuyerState } from '../auth';
import type { AppDeps } from '../deps';
import { reply, type ErrorCode } from '../errors';

const PaymentBody = z.object({ paymentId: z.string().regex(PAYMENT_ID, 'printable ASCII, 1-200 characters'), amount: z.number().int().min(0) }).strict();

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

/** @returns the reservation of an order PostgreSQL does not hold yet, with its sale (which its id carries), or undefined */
async function reservationOf({ store }: AppDeps, orderId: string): Promise<(Reservation & { saleId: number }) | undefined> {
  const saleId = saleOfOrder(orderId);
  const held = saleId === undefined ? undefined : await store.findReservation(saleId, orderId);
  return held && saleId !== undefined ? { saleId, ...held } : undefined;
}

/** GET handler: the buyer's own order or 404 ORDER_NOT_FOUND (unknown, malformed or someone else's). */
export function getOrderHandler(deps: AppDeps) {
  return async function getOrder(ctx: Context): Promise<void> {
    const { buyerId } = ctx.state as BuyerState;
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const row = await findOrder(deps.pool, orderId);
    if (row) {
      if (row.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
      ctx.body = fromRow(row);
      return;
    }
    const held = await reservationOf(deps, orderId);
    const item = held?.userId === buyerId ? await deps.catalog.get(held.itemId) : undefined;
    if (!held || !item) return reply(ctx, 'ORDER_NOT_FOUND');
    // The same terms reserve.lua queued for the workflow: the price and window of the item at the 202.
    ctx.body = {
      orderId,
      saleId: held.saleId,
      itemId: held.itemId,
      status: 'PENDING',
      priceMinor: item.priceMinor,
      paymentDeadline: new Date(held.reservedAtMs + item.paymentWindowMs).toISOString(),
    };
  };
}

/**
 * Stores an accepted order that has no row yet (its workflow not started, or not run), from its reservation
 * and the item's terms, as its workflow would: PAID at once when PostgreSQL takes the payment in the same
 * statement (storePaidOrder), else as persistOrder stores it (idempotent; the workflow finds the row later).
 * Refuses first, writing nothing, a payment the order could not take: a wrong amount, or a deadline past.
 * @returns 'PAID' once stored paid; undefined once stored otherwise (or found stored), for payOrder to decide;
 *   or the refusal
 */
async function storeAccepted(deps: AppDeps, orderId: string, payment: Payment): Promise<'PAID' | ErrorCode | undefined> {
  const held = await reservationOf(deps, orderId);
  const item = held ? await deps.catalog.get(held.itemId) : undefined;
  if (!held || !item) return 'ORDER_NOT_FOUND';
  if (payment.amount !== item.priceMinor) return 'AMOUNT_MISMATCH';
  const deadlineMs = held.reservedAtMs + item.paymentWindowMs;
  if (Date.now() >= deadlineMs) return 'PAYMENT_WINDOW_CLOSED';
  const order = { ...held, priceMinor: item.priceMinor, paymentWindowMs: item.paymentWindowMs };
  if (await storePaidOrder(deps.pool, order, new Date(deadlineMs), payment.paymentId)) return 'PAID';
  await persistOrder(deps.pool, order, new Date(deadlineMs));
  return undefined;
}

/**
 * POST handler for the payment service (already authenticated by its bearer credential). PostgreSQL decides
 * (orders.payOrder), so the answer waits for no workflow task. A payment to a stored order is then signalled
 * to its workflow, so that it settles now (OrderPaid) rather than when its timer fires, where it would find
 * the row PAID anyway. An order this route stored PAID itself is not: its workflow had not stored it, so it
 * will find the row PAID in its first task. In a sale's payment burst most orders are such (the drain runs
 * behind the 202s), and the signal was most of the route's cost: a gRPC call here and a workflow task in Temporal.
 */
export function paymentHandler(deps: AppDeps) {
  const { pool, workflows, log } = deps;
  return async function pay(ctx: Context): Promise<void> {
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const body = PaymentBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: body.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`) });
    const payment: Payment = body.data;
    let result = await payOrder(pool, orderId, payment.paymentId, payment.amount);
    let storedPaid = false;
    if (!result) {
      const stored = await storeAccepted(deps, orderId, payment);
      if (stored === 'PAID') {
        storedPaid = true;
        result = { status: 'PAID', paymentId: payment.paymentId };
      } else if (stored) {
        return reply(ctx, stored, stored === 'ORDER_NOT_FOUND' ? undefined : { orderId });
      } else {
        result = await payOrder(pool, orderId, payment.paymentId, payment.amount);
        if (!result) return reply(ctx, 'ORDER_NOT_FOUND');
      }
    }
    if ('error' in result) return reply(ctx, result.error, { orderId });
    log.info({ orderId, paymentId: payment.paymentId, storedPaid }, 'payment accepted');
    if (!storedPaid) {
      workflows.signalPaid(orderId, payment).catch((err: unknown) => log.warn({ err: (err as Error).message, orderId }, 'paid signal not delivered; the workflow settles when its timer fires'));
    }
    ctx.body = { orderId, status: 'PAID', paymentId: result.paymentId };
  };
}
