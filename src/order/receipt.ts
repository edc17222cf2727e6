/**
 * Payment receipts: the API's signed word on when the payment service asked to pay an order (docs/design.md,
 * "Payments before the start"). A `paid` signal or `pay` update is judged against the deadline when Temporal
 * received it; in a stampede Temporal's intake can lag the payment service by many seconds, so a payment sent
 * in time would be refused. The payment client looks the order up at the API's internal door before it sends;
 * the door stamps a receipt bound to (orderId, paymentId, amount) and signed with PAYMENT_RECEIPT_SECRET, which
 * only the API and the workers hold, and the payment carries it. The worker judges a payment with a valid
 * receipt at the receipt's time (I6 against the deadline the buyer was shown), a payment without one as before.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Payment, PaymentReceipt } from './types';

/**
 * How long after its stamp a receipt still vouches for its payment (ms): long enough for Temporal's intake in a
 * stampede (docs/performance.md), short enough that a receipt is no ticket to pay much later.
 */
export const RECEIPT_MAX_AGE_MS = 120_000;

const mac = (secret: string, orderId: string, payment: Pick<Payment, 'paymentId' | 'amount'>, atMs: number) =>
  createHmac('sha256', secret).update(`payment-receipt:v1:${orderId}:${payment.paymentId}:${payment.amount}:${atMs}`).digest('base64url');

/**
 * @param secret PAYMENT_RECEIPT_SECRET
 * @param atMs the API's clock when the payment service asked (epoch ms)
 * @returns the receipt for this order and payment (amount in minor units)
 */
export function issueReceipt(secret: string, orderId: string, payment: Pick<Payment, 'paymentId' | 'amount'>, atMs: number): PaymentReceipt {
  return { atMs, mac: mac(secret, orderId, payment, atMs) };
}

/**
 * @param secret PAYMENT_RECEIPT_SECRET; undefined: receipts are not honoured
 * @param receivedAtMs when Temporal received the payment (epoch ms)
 * @returns when the payment is judged (epoch ms): its receipt's stamp when the receipt is this order's and this
 *   payment's, signed with the secret and at most RECEIPT_MAX_AGE_MS old on receipt (a stamp ahead of
 *   receivedAtMs, the two hosts' clocks, counts as receivedAtMs); otherwise undefined (judge at receivedAtMs)
 */
export function receiptTime(secret: string | undefined, orderId: string, payment: Payment, receivedAtMs: number): number | undefined {
  const receipt = payment.receipt;
  if (!secret || !receipt || !Number.isSafeInteger(receipt.atMs) || typeof receipt.mac !== 'string') return undefined;
  if (receivedAtMs - receipt.atMs > RECEIPT_MAX_AGE_MS) return undefined;
  const expected = Buffer.from(mac(secret, orderId, payment, receipt.atMs));
  const given = Buffer.from(receipt.mac);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  return Math.min(receipt.atMs, receivedAtMs);
}

/** @returns the receipt as the door's Payment-Receipt header carries it: `<atMs>.<mac>` */
export function formatReceipt(receipt: PaymentReceipt): string {
  return `${receipt.atMs}.${receipt.mac}`;
}

/** @returns the receipt a Payment-Receipt header carries, or undefined for none or a malformed one */
export function parseReceipt(header: string | null | undefined): PaymentReceipt | undefined {
  const match = /^(\d{1,16})\.([A-Za-z0-9_-]{43})$/.exec(header ?? '');
  return match ? { atMs: Number(match[1]), mac: match[2] } : undefined;
}
