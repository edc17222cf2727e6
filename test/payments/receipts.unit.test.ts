/** The payment client's memory of receipts (src/payments/receipts.ts): a retry carries its first receipt. */
import { RECEIPT_MAX_AGE_MS } from '../../src/order/receipt';
import { ReceiptBook } from '../../src/payments/receipts';

const ORDER = '0190c1d2-0000-7000-8000-000000000001';
const PAYMENT = { paymentId: 'pay-1', amount: 3100 };
const first = { atMs: 1_000_000, mac: 'first' };
const later = { atMs: 1_030_000, mac: 'later' };

test('a retry of the same payment carries the first receipt while it is young enough', () => {
  const book = new ReceiptBook();
  expect(book.keep(ORDER, PAYMENT, first, first.atMs)).toBe(first);
  expect(book.keep(ORDER, PAYMENT, later, later.atMs)).toBe(first);
  expect(book.keep(ORDER, PAYMENT, undefined, later.atMs)).toBe(first);
  // Past the age limit the first one vouches for nothing: the new one is sent, and kept.
  const old = first.atMs + RECEIPT_MAX_AGE_MS + 1;
  const fresh = { atMs: old, mac: 'fresh' };
  expect(book.keep(ORDER, PAYMENT, fresh, old)).toBe(fresh);
  expect(book.keep(ORDER, PAYMENT, later, old + 1)).toBe(fresh);
});

test('another order, payment id or amount is another payment: its own receipt', () => {
  const book = new ReceiptBook();
  book.keep(ORDER, PAYMENT, first, first.atMs);
  expect(book.keep('0190c1d2-0000-7000-8000-000000000002', PAYMENT, later, later.atMs)).toBe(later);
  expect(book.keep(ORDER, { ...PAYMENT, paymentId: 'pay-2' }, later, later.atMs)).toBe(later);
  expect(book.keep(ORDER, { ...PAYMENT, amount: 3000 }, later, later.atMs)).toBe(later);
  expect(book.keep(ORDER, { ...PAYMENT, paymentId: 'pay-3' }, undefined, later.atMs)).toBeUndefined();
});
