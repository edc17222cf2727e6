/**
 * The order workflow's public surface, shared by the workflow, the API, the starter and the payment service: its
 * input, signals `paid`, `cancelled` and `startNow`, updates `pay` and `cancel`, query `status`, and the custom
 * search attributes the Web UI filters on.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { CancelReason, CancelResult, Order, PayResult, Payment } from '../order/types';

/**
 * The input of a workflow a payment starts (signal-with-start, update-with-start: src/payments/client.ts): the
 * order's id alone, from which the workflow reads its terms (Orders.terms). The starter's input is OrderInput.
 */
export interface OrderRef {
  orderId: string;
}

/** Fire-and-forget "paid" from the payment service; a late one yields a PaymentRefundRequired event. */
export const paidSignal = defineSignal<[Payment]>('paid');
/**
 * The drain's turn for an order whose run a `paid` signal created with a start delay (src/payments/client.ts):
 * sent with a start by the starter, it ends the delay (a signal-with-start dispatches the delayed first task);
 * the run does nothing else with it (docs/design.md, "Payments before the start").
 */
export const startNowSignal = defineSignal('startNow');
/** "paid" with an answer: PAID, or why not (PAYMENT_WINDOW_CLOSED, ORDER_NOT_PENDING, ORDER_CANCELLED, AMOUNT_MISMATCH, PAYMENT_ID_USED). */
export const payUpdate = defineUpdate<PayResult, [Payment]>('pay');
/** The cancel request of a buyer, the payment service or an operator, as `{ reason }` (CancelReason). */
export interface CancelRequest {
  reason: CancelReason;
}
/**
 * Fire-and-forget cancel: the API's word that PostgreSQL cancelled the order (its routes decide there first),
 * or an operator's request from the Temporal Web UI; the workflow decides it in PostgreSQL either way.
 */
export const cancelledSignal = defineSignal<[CancelRequest]>('cancelled');
/** Cancel with an answer (the Temporal CLI's `workflow update execute --name cancel`): CancelResult. */
export const cancelUpdate = defineUpdate<CancelResult, [CancelRequest]>('cancel');
/** Current state of the order. */
export const statusQuery = defineQuery<Order>('status');

export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const SaleIdKey = defineSearchAttributeKey('SaleId', SearchAttributeType.INT);
export const ItemIdKey = defineSearchAttributeKey('ItemId', SearchAttributeType.INT);
export const UserIdKey = defineSearchAttributeKey('UserId', SearchAttributeType.KEYWORD);
