/**
 * Order routes, each a call into Orders (openapi.yaml): a buyer reads their own order (404 for anyone else's, I6);
 * the payment service pays an order from its 202 on, decided in PostgreSQL; in development the sale page's "Pay".
 */
import { trace } from '@opentelemetry/api';
import type { Context, Next } from 'koa';
import { z } from 'zod';
import { formatReceipt, issueReceipt } from '../../order/receipt';
import { isOrderId, PAYMENT_ID, type Payment } from '../../order/types';
import type { BuyerState } from '../auth';
import type { ServiceState } from '../serviceAuth';
import type { AppDeps } from '../deps';
import { issuesOf, reply, type AnsweredState, type ErrorCode } from '../errors';
import { ATTR, linkTo } from '../../tracing';

const PaymentBody = z.object({ paymentId: z.string().regex(PAYMENT_ID, 'printable ASCII, 1-200 characters'), amount: z.number().int().min(0) }).strict();

/** GET handler: the buyer's own order (Orders.find) or 404 ORDER_NOT_FOUND (unknown, malformed or someone else's). */
export function getOrderHandler({ orders }: AppDeps) {
  return async function getOrder(ctx: Context): Promise<void> {
    // One buyer's order, whatever the answer: no shared cache may keep it.
    ctx.set('Cache-Control', 'no-store');
    const { buyerId } = ctx.state as BuyerState;
    const orderId: string = ctx.params.orderId;
    const order = isOrderId(orderId) ? await orders.find(orderId) : undefined;
    if (!order || order.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
    ctx.body = order;
  };
}

/** The payment a lookup is for (query `paymentId` and `amount`, each given at most once; a receipt needs both). */
const PaymentQuery = z.object({ paymentId: PaymentBody.shape.paymentId.optional(), amount: z.string().regex(/^\d{1,15}$/).transform(Number).optional() }).strict();

/**
 * GET handler for the payment service (its bearer credential): any order as Orders.find reads it (from its 202
 * on), or 404 ORDER_NOT_FOUND. The payment client (src/payments/client.ts) asks it before it starts a workflow
 * with a payment, so that an id naming no accepted order starts nothing. Asked for a payment (`?paymentId=&amount=`)
 * with PAYMENT_RECEIPT_SECRET set, its header Payment-Receipt stamps that payment now (src/order/receipt.ts).
 * 400 INVALID_QUERY for a malformed or unknown query parameter.
 */
export function paymentOrderHandler({ orders, config }: AppDeps) {
  return async function paymentOrder(ctx: Context): Promise<void> {
    ctx.set('Cache-Control', 'no-store');
    const orderId: string = ctx.params.orderId;
    const query = PaymentQuery.safeParse(ctx.query);
    if (!query.success) return reply(ctx, 'INVALID_QUERY', { details: ['paymentId (printable ASCII, 1-200 characters) and amount (an integer >= 0), each at most once'] });
    const order = isOrderId(orderId) ? await orders.find(orderId) : undefined;
    if (!order) return reply(ctx, 'ORDER_NOT_FOUND');
    const secret = config.PAYMENT_RECEIPT_SECRET;
    const { paymentId, amount } = query.data;
    if (secret && paymentId !== undefined && amount !== undefined) ctx.set('Payment-Receipt', formatReceipt(issueReceipt(secret, orderId, { paymentId, amount }, Date.now())));
    ctx.body = order;
  };
}

/**
 * POST handler for the payment service (already authenticated by its bearer credential): Orders.pay decides
 * in PostgreSQL, so the answer waits for no workflow task. A payment to an order its workflow had stored is
 * then signalled to the workflow, so that it settles now (OrderPaid) rather than at its deadline, where it
 * would find the row PAID anyway. An order this payment stored is not: its workflow, whenever it runs, finds
 * the row PAID in its first task.
 */
export function paymentHandler(deps: AppDeps) {
  return async function pay(ctx: Context): Promise<void> {
    const orderId: string = ctx.params.orderId;
    if (!isOrderId(orderId)) return reply(ctx, 'ORDER_NOT_FOUND');
    const body = PaymentBody.safeParse(ctx.request.body);
    if (!body.success) return reply(ctx, 'INVALID_BODY', { details: issuesOf(body.error) });
    await takePayment(deps, ctx, orderId, body.data);
  };
}

/**
 * POST handler of the development "Pay" (mounted only where development tokens are served): the signed-in
 * buyer pays their own order its price through takePayment, as the payment service would; 404
 * ORDER_NOT_FOUND for anyone else's order.
 */
export function devPaymentHandler(deps: AppDeps) {
  return async function devPay(ctx: Context): Promise<void> {
    const { buyerId } = ctx.state as BuyerState;
    const orderId: string = ctx.params.orderId;
    const order = isOrderId(orderId) ? await deps.orders.find(orderId) : undefined;
    if (!order || order.userId !== buyerId) return reply(ctx, 'ORDER_NOT_FOUND');
    await takePayment(deps, ctx, orderId, { paymentId: `dev-${orderId}`, amount: order.priceMinor });
  };
}

/**
 * Orders.pay, answered: 200 PAID, or the refusal's code; a stored order's workflow is then signalled. A recorded
 * request span (tracing on, sampled) links to the span that stored the order.
 */
async function takePayment({ orders, workflows, log }: AppDeps, ctx: Context, orderId: string, payment: Payment): Promise<void> {
  const result = await orders.pay(orderId, payment);
  // The payment comes in its own trace (the payment service's): a recorded span links to the order's. The read
  // is the trace's, never the payment's: it fails nothing PostgreSQL has decided.
  const span = trace.getActiveSpan();
  if (span?.isRecording()) {
    const link = linkTo(await orders.traceParentOf(orderId).catch(() => undefined));
    span.setAttribute(ATTR.orderId, orderId);
    if (link) span.addLink(link);
  }
  if (!result) return reply(ctx, 'ORDER_NOT_FOUND');
  if ('error' in result) return reply(ctx, result.error, { orderId });
  log.info({ orderId, paymentId: payment.paymentId, stored: result.stored ?? false }, 'payment accepted');
  if (!result.stored) {
    workflows.signalPaid(orderId, payment).catch((err: unknown) => log.warn({ err: (err as Error).message, orderId }, 'paid signal not delivered; the workflow settles at its deadline'));
  }
  ctx.body = { orderId, status: 'PAID', paymentId: result.paymentId };
}

/**
 * Middleware before the payment route's credential check: records the latency of every answer to the payment
 * service under its code (PAID, or the refusal's) in flash_sale_payment_duration_seconds (an answer to a
 * missing or wrong credential in the unauthenticated count instead), and answers what the route throws as the app does
 * (replyToError), so that a 503 is counted as one.
 */
export function paymentMetrics({ metrics }: Pick<AppDeps, 'metrics'>, replyToError: (ctx: Context, err: unknown) => ErrorCode) {
  return async function countPayment(ctx: Context, next: Next): Promise<void> {
    const startedAt = performance.now();
    try {
      await next();
    } catch (err) {
      replyToError(ctx, err);
    }
    const state = ctx.state as AnsweredState & ServiceState;
    const code = state.outcome ?? (ctx.status === 200 ? 'PAID' : 'INTERNAL_ERROR');
    if (state.service) metrics.paymentDuration.labels(code).observe((performance.now() - startedAt) / 1000);
    else metrics.unauthenticated.labels('payment', code).inc();
  };
}
