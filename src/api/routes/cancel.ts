/**
 * Cancel routes (openapi.yaml; docs/design.md, "Cancel"): a buyer cancels their own PENDING order (public door;
 * 404 for anyone else's, I6), the payment service reports a declined charge and an operator cancels an order
 * (internal door). Each is Orders.cancel, decided in PostgreSQL against payment and deadline, then the unit back
 * in Redis at once, then the order's workflow told.
 */
import type { Context } from 'koa';
import { z } from 'zod';
import { isOrderId, PAYMENT_ID, type CancelReason } from '../../order/types';
import type { BuyerState } from '../auth';
import type { AppDeps } from '../deps';
import { issuesOf, reply } from '../errors';

const PaymentFailureBody = z.object({ paymentId: z.string().regex(PAYMENT_ID, 'printable ASCII, 1-200 characters'), declineCode: z.string().regex(PAYMENT_ID).optional() }).strict();
const OperatorCancelBody = z.object({ note: z.string().min(1).max(500) }).strict();

/** POST handler: the signed-in buyer cancels their own order (reason BUYER); 404 ORDER_NOT_FOUND for anyone else's. */
export function buyerCancelHandler(deps: AppDeps) {
  return async function buyerCancel(ctx: Context): Promise<void> {
    ctx.set('Cache-Control', 'no-store');
    const { buyerId } = ctx.state as BuyerState;
    const orderId: string = ctx.params.orderId;
    const order = isOrderId(orderId) ? await deps.orders.find(orderId) : undefined;
    if (!order || order.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
    await cancel(deps, ctx, orderId, 'BUYER');
  };
}

/**
 * POST handler for the payment service (its bearer credential): the charge for the order was declined
 * (reason PAYMENT_FAILED), so its unit goes back now rather than at the deadline.
 */
export function paymentFailureHandler(deps: AppDeps) {
  return async function paymentFailed(ctx: Context): Promise<void> {
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const body = PaymentFailureBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: issuesOf(body.error) });
    deps.log.info({ orderId, ...body.data }, 'payment failure reported');
    await cancel(deps, ctx, orderId, 'PAYMENT_FAILED');
  };
}

/** POST handler for an operator (admin credential): cancels an order (reason OPERATOR), the note kept in the log. */
export function operatorCancelHandler(deps: AppDeps) {
  return async function operatorCancel(ctx: Context): Promise<void> {
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const body = OperatorCancelBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: issuesOf(body.error) });
    deps.log.warn({ orderId, note: body.data.note }, 'order cancelled by an operator');
    await cancel(deps, ctx, orderId, 'OPERATOR');
  };
}

/** Waits before each new try of a cancel's release that failed (ms): the answer waits for them, a few hundred ms at most. */
const RELEASE_AGAIN_MS = [100, 300];

/**
 * Orders.cancel, answered: 200 CANCELLED with the reason PostgreSQL keeps (a second cancel answers as the first),
 * or the refusal's code. A CANCELLED order's unit goes back to Redis before the answer, so that its buyer may buy
 * again at once (I3): tried again when it fails, and if it still fails, 503 RELEASE_PENDING (the row stays
 * CANCELLED; the same cancel again answers 200 once the unit is back, and the workflow's compensation and the
 * reconciler give it back meanwhile), never a 200 with the buyer still locked out.
 */
async function cancel({ orders, store, soldOut, workflows, metrics, log }: AppDeps, ctx: Context, orderId: string, reason: CancelReason): Promise<void> {
  const result = await orders.cancel(orderId, reason);
  metrics.cancels.labels(reason, result ? ('error' in result ? result.error : 'CANCELLED') : 'ORDER_NOT_FOUND').inc();
  if (!result) return reply(ctx, 'ORDER_NOT_FOUND');
  if ('error' in result) return reply(ctx, result.error, { orderId });
  const released = await releaseOf(store, result.order);
  if (released) soldOut.unflag(result.order.itemId);
  else log.warn({ orderId }, 'unit not released at the cancel: answered 503 RELEASE_PENDING; the workflow and the reconciler release it');
  workflows.signalCancelled(orderId, result.reason).catch((err: unknown) => log.warn({ err: (err as Error).message, orderId }, 'cancelled signal not delivered; the workflow settles at its deadline'));
  if (!released) return reply(ctx, 'RELEASE_PENDING', { orderId, status: 'CANCELLED', reason: result.reason });
  ctx.body = { orderId, status: 'CANCELLED', reason: result.reason };
}

/** @returns whether the cancelled order's release went through (ReservationStore.release, idempotent), tried up to three times */
async function releaseOf(store: AppDeps['store'], order: Parameters<AppDeps['store']['release']>[0]): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      await store.release(order, true);
      return true;
    } catch {
      if (attempt >= RELEASE_AGAIN_MS.length) return false;
      await new Promise((resolve) => setTimeout(resolve, RELEASE_AGAIN_MS[attempt]));
    }
  }
}
