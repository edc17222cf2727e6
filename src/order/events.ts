/**
 * Order events on Kafka (topic flash-sale-orders, key = itemId): their shape and how their ids are made.
 * Pure: safe to import from workflow code.
 */
import type { OrderInput } from './types';

export type OrderEventType =
  | 'OrderPlaced'
  | 'OrderPaid'
  | 'OrderExpired'
  | 'OrderRejected'
  | 'OrderCancelled'
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
