/**
 * The order's vocabulary: statuses, the terms a workflow is started with, payments and their outcomes, and the
 * view of an order. Pure: safe to import from workflow code.
 */

export type OrderStatus = 'PENDING' | 'PAID' | 'EXPIRED' | 'REJECTED' | 'CANCELLED';

/** Who ended a PENDING order before its deadline (docs/design.md, "Cancel"): stored as the CANCELLED row's reason. */
export const CANCEL_REASONS = ['BUYER', 'PAYMENT_FAILED', 'OPERATOR'] as const;
export type CancelReason = (typeof CANCEL_REASONS)[number];

/** @returns whether value is a CancelReason */
export function isCancelReason(value: unknown): value is CancelReason {
  return (CANCEL_REASONS as readonly unknown[]).includes(value);
}

/** What PostgreSQL holds of an order once a transition has run. */
export interface Outcome {
  status: OrderStatus;
  paymentId?: string;
  reason?: string;
}

/**
 * The compensation an outcome calls for (I2, I4): none while the order is live (PENDING, PAID); for EXPIRED,
 * CANCELLED and REJECTED its reservation is released, the unit back in stock, unless PostgreSQL refused the order because
 * another live order holds that unit (REJECTED SOLD_OUT: Redis must not hand that unit out again) or a rebuild
 * listed it free already (REJECTED STOCK_REBUILT).
 * @returns undefined when there is nothing to compensate
 */
export function compensationFor(outcome: Pick<Outcome, 'status' | 'reason'>): { unitBack: boolean } | undefined {
  if (outcome.status === 'EXPIRED' || outcome.status === 'CANCELLED') return { unitBack: true };
  if (outcome.status === 'REJECTED') return { unitBack: outcome.reason !== 'SOLD_OUT' && outcome.reason !== 'STOCK_REBUILT' };
  return undefined;
}

const ORDER_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** @returns whether text is a lower-case RFC 9562 version 8 UUID, the only form our order ids take (orderId.ts) */
export function isOrderId(text: string): boolean {
  return ORDER_ID.test(text);
}

/**
 * A payment id, the payment service's reference and our idempotency key per payment: printable ASCII, 1–200
 * characters, so that PostgreSQL, Kafka and every log take it as it is (a NUL byte, say, PostgreSQL refuses).
 */
export const PAYMENT_ID = /^[ -~]{1,200}$/;

/** What the purchase route hands to the order's workflow (workflow id = orderId). */
export interface OrderInput {
  orderId: string;
  saleId: number;
  itemId: number;
  userId: string;
  /** Price in minor currency units (cents). */
  priceMinor: number;
  paymentWindowMs: number;
  /** When Redis reserved the unit, ms since the epoch (UTC). */
  reservedAtMs: number;
  /**
   * The number of the unit the order holds, 1..quantity, as Redis handed it out (lua/reserve.lua): PostgreSQL
   * stores it with the order, and holds one live order per unit (I1, orders_live_unit). Absent until Redis
   * reserved it.
   */
  unit?: number;
  /**
   * The stock shard the unit was taken from and goes back to (src/reservation/layout.ts); absent in orders of
   * one-shard sales and in workflows started before shards, which means shard 0.
   */
  stockShard?: number;
  /**
   * The epoch of that shard's stock when the unit was taken (migrations/…_stock-epochs.sql): PostgreSQL stores
   * the order live only while it is the shard's epoch, so that a unit a rebuild listed free, not knowing the
   * order, is not held twice. Absent until Redis reserved the unit.
   */
  stockEpoch?: number;
}

/**
 * The payment window runs from the 202 (when Redis reserved the unit): this is the deadline the buyer is shown,
 * the one GET answers, the one the workflow waits for and the one PostgreSQL stores and enforces.
 * @returns the order's payment deadline, ms since the epoch (UTC)
 */
export function paymentDeadlineMs(order: Pick<OrderInput, 'reservedAtMs' | 'paymentWindowMs'>): number {
  return order.reservedAtMs + order.paymentWindowMs;
}

/**
 * The amount rule: a payment pays an order only for exactly its price, in minor units. (PostgreSQL's
 * payment statement holds the same guard, `price_minor = amount`, so that the row decides atomically.)
 */
export function paysPrice(order: Pick<OrderInput, 'priceMinor'>, payment: Pick<Payment, 'amount'>): boolean {
  return payment.amount === order.priceMinor;
}

/** The payment service's word that an order was paid; amount in minor units. */
export interface Payment {
  paymentId: string;
  amount: number;
  /** The API's stamp of when the payment service asked (src/order/receipt.ts); judged then when valid. */
  receipt?: PaymentReceipt;
}

/** When the API's internal door saw a payment (epoch ms), signed with PAYMENT_RECEIPT_SECRET (base64url HMAC-SHA256). */
export interface PaymentReceipt {
  atMs: number;
  mac: string;
}

/** Answer of the `pay` update: accepted, or why not, so the payment service knows to refund. */
export type PayResult =
  | { status: 'PAID'; paymentId: string }
  | { error: 'PAYMENT_WINDOW_CLOSED' | 'ORDER_NOT_PENDING' | 'ORDER_CANCELLED' | 'AMOUNT_MISMATCH' | 'PAYMENT_ID_USED' };

/**
 * Answer of a cancel (the `cancel` update, the cancel routes): CANCELLED with the reason PostgreSQL keeps (the
 * first cancel's, when the order was cancelled already), or why not: ORDER_ALREADY_PAID, PAYMENT_WINDOW_CLOSED
 * (its deadline passed, or it EXPIRED: the deadline won), ORDER_NOT_PENDING (REJECTED).
 */
export type CancelResult =
  | { status: 'CANCELLED'; reason: CancelReason }
  | { error: 'ORDER_ALREADY_PAID' | 'PAYMENT_WINDOW_CLOSED' | 'ORDER_NOT_PENDING' };

/**
 * An order as its readers see it, one shape for all: GET /orders/{orderId}, the workflow's `status` query and
 * result, the audit and the demo.
 */
export interface Order {
  orderId: string;
  saleId: number;
  itemId: number;
  userId: string;
  status: OrderStatus;
  /** Minor currency units. */
  priceMinor: number;
  /** ISO-8601 UTC end of the payment window (paymentDeadlineMs). */
  paymentDeadline: string;
  paymentId?: string;
  reason?: string;
}
