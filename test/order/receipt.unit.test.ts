/** Payment receipts (src/order/receipt.ts): which stamp vouches for which payment, and for how long. */
import { formatReceipt, issueReceipt, parseReceipt, receiptTime, RECEIPT_MAX_AGE_MS } from '../../src/order/receipt';

const SECRET = 'a-receipt-secret-of-at-least-32-characters';
const ORDER = '0190c1d2-0000-7000-8000-000000000001';
const PAYMENT = { paymentId: 'pay-1', amount: 3100 };
const AT = 1_800_000_000_000;

test('a receipt vouches for its own order and payment, signed with the secret, from its stamp on', () => {
  const receipt = issueReceipt(SECRET, ORDER, PAYMENT, AT);
  expect(receiptTime(SECRET, ORDER, { ...PAYMENT, receipt }, AT + 5000)).toBe(AT);
  expect(receiptTime(SECRET, ORDER, { ...PAYMENT, receipt }, AT + RECEIPT_MAX_AGE_MS)).toBe(AT);
  // The API's clock ahead of Temporal's: never judged later than received.
  expect(receiptTime(SECRET, ORDER, { ...PAYMENT, receipt }, AT - 300)).toBe(AT - 300);
});

test.each([
  ['no secret on the worker', undefined, ORDER, PAYMENT, 0],
  ['another secret', `${SECRET}-other`, ORDER, PAYMENT, 0],
  ['another order', SECRET, '0190c1d2-0000-7000-8000-000000000002', PAYMENT, 0],
  ['another payment id', SECRET, ORDER, { ...PAYMENT, paymentId: 'pay-2' }, 0],
  ['another amount', SECRET, ORDER, { ...PAYMENT, amount: 3099 }, 0],
  ['older than the limit on receipt', SECRET, ORDER, PAYMENT, RECEIPT_MAX_AGE_MS + 1],
])('%s: no receipt time (judged when received)', (_name, secret, orderId, payment, age) => {
  const receipt = issueReceipt(SECRET, ORDER, PAYMENT, AT);
  expect(receiptTime(secret, orderId, { ...payment, receipt }, AT + 1000 + age)).toBeUndefined();
});

test('a tampered or malformed receipt vouches for nothing', () => {
  const receipt = issueReceipt(SECRET, ORDER, PAYMENT, AT);
  const judged = (r: unknown) => receiptTime(SECRET, ORDER, { ...PAYMENT, receipt: r as typeof receipt }, AT + 1000);
  expect(judged({ ...receipt, atMs: AT - 60_000 })).toBeUndefined();
  expect(judged({ ...receipt, mac: receipt.mac.slice(1) })).toBeUndefined();
  expect(judged({ ...receipt, mac: `${receipt.mac}A` })).toBeUndefined();
  expect(judged({ atMs: String(AT), mac: receipt.mac })).toBeUndefined();
  expect(judged({ atMs: AT, mac: 42 })).toBeUndefined();
  expect(judged(undefined)).toBeUndefined();
  expect(judged(receipt)).toBe(AT);
});

test('the Payment-Receipt header carries a receipt both ways, and nothing else', () => {
  const receipt = issueReceipt(SECRET, ORDER, PAYMENT, AT);
  expect(parseReceipt(formatReceipt(receipt))).toEqual(receipt);
  for (const header of [null, undefined, '', `${AT}`, `x.${receipt.mac}`, `${AT}.${receipt.mac}=`, `${AT}.${receipt.mac.slice(2)}`, ` ${formatReceipt(receipt)}`]) {
    expect(parseReceipt(header)).toBeUndefined();
  }
});
