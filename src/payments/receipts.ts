/**
 * The payment client's memory of receipts: a payment sent again (its call failed or timed out) carries the
 * receipt of its first lookup, not a new one, so that a retry is judged when the payment was first asked for,
 * as the first attempt would have been (src/order/receipt.ts). Per process, for RECEIPT_MAX_AGE_MS.
 */
import { RECEIPT_MAX_AGE_MS } from '../order/receipt';
import type { Payment, PaymentReceipt } from '../order/types';

export class ReceiptBook {
  private readonly kept = new Map<string, PaymentReceipt>();

  /**
   * @param receipt what the door stamped for this lookup (undefined: none)
   * @param nowMs this process's clock (epoch ms)
   * @returns the receipt to send: the first one kept for this order, payment id and amount while it is within
   *   RECEIPT_MAX_AGE_MS of nowMs, else the new one (then kept)
   */
  keep(orderId: string, payment: Pick<Payment, 'paymentId' | 'amount'>, receipt: PaymentReceipt | undefined, nowMs: number): PaymentReceipt | undefined {
    for (const [key, old] of this.kept) if (nowMs - old.atMs > RECEIPT_MAX_AGE_MS) this.kept.delete(key);
    const key = JSON.stringify([orderId, payment.paymentId, payment.amount]);
    const first = this.kept.get(key);
    if (first) return first;
    if (receipt) this.kept.set(key, receipt);
    return receipt;
  }
}
