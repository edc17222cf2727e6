/**
 * Shared vocabulary of the service: order statuses, workflow input and views, events, and the parsers for
 * the identifiers that reach us from outside. Pure: safe to import from workflow code.
 */

export type OrderStatus = 'PENDING' | 'PAID' | 'EXPIRED' | 'REJECTED';

/** Largest id of an INT4 identity column. */
export const MAX_INT4 = 2_147_483_647;

/**
 * Parses an item or sale id from a path segment: a positive decimal integer that fits INT4, nothing else
 * (no sign, exponent, hex, leading zeros or whitespace), so no request is ever rounded onto another item.
 * @returns the id, or undefined when the text is not one
 */
export function parseId(text: string): number | undefined {
  if (!/^[1-9][0-9]{0,9}$/.test(text)) return undefined;
  const id = Number(text);
  return id <= MAX_INT4 ? id : undefined;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** @returns whether text is a lower-case RFC 9562 UUID, the only form our order ids take */
export function isOrderId(text: string): boolean {
  return UUID.test(text);
}

/**
 * Buyer ids come from the JWT `sub` (I6). They are used in Redis values ('|'-separated) and search
 * attributes, so the alphabet is kept narrow.
 */
export const BUYER_ID = /^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$/;

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
}

/** The payment service's word that an order was paid; amount in minor units. */
export interface Payment {
  paymentId: string;
  amount: number;
}

/** Answer of the `pay` update: accepted, or why not, so the payment service knows to refund. */
export type PayResult =
  | { status: 'PAID'; paymentId: string }
  | { error: 'PAYMENT_WINDOW_CLOSED' | 'ORDER_NOT_PENDING' | 'AMOUNT_MISMATCH' };

/** Answer of the `status` query, also the workflow's result. */
export interface OrderView {
  orderId: string;
  saleId: number;
  itemId: number;
  userId: string;
  status: OrderStatus;
  priceMinor: number;
  /** ISO-8601 UTC end of the payment window. */
  deadline: string;
  paymentId?: string;
  reason?: string;
}

export type OrderEventType =
  | 'OrderPlaced'
  | 'OrderPaid'
  | 'OrderExpired'
  | 'OrderRejected'
  | 'PaymentRefundRequired';

/** Event on Kafka topic flash-sale-orders, key = itemId. Consumers drop duplicates by eventId (I5). */
export interface OrderEvent {
  eventId: string;
  type: OrderEventType;
  version: 1;
  /** ISO-8601 UTC. */
  occurredAt: string;
  orderId: string;
  saleId: number;
  itemId: number;
  userId: string;
  paymentId?: string;
  amount?: number;
  reason?: string;
}

/**
 * Builds an event whose eventId is derived from the order and type (plus the payment id for refunds, of
 * which one order may have several), so a retried publish carries the same id.
 */
export function orderEvent(
  type: OrderEventType,
  order: Pick<OrderInput, 'orderId' | 'saleId' | 'itemId' | 'userId'>,
  occurredAt: Date,
  extra: Pick<OrderEvent, 'paymentId' | 'amount' | 'reason'> = {},
): OrderEvent {
  const suffix = type === 'PaymentRefundRequired' ? `:${extra.paymentId ?? ''}` : '';
  return {
    eventId: `${order.orderId}:${type}${suffix}`,
    type,
    version: 1,
    occurredAt: occurredAt.toISOString(),
    orderId: order.orderId,
    saleId: order.saleId,
    itemId: order.itemId,
    userId: order.userId,
    ...extra,
  };
}
