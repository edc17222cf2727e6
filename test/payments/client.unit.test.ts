/**
 * endedAnswer (src/payments/client.ts): what a payment meets at an order whose workflow has ended, the same answer
 * Orders.pay gives on that row (amount first, then the replay of the payment that paid it, then the order's state).
 */
import { endedAnswer } from '../../src/payments/client';
import type { Order } from '../../src/order/types';

const order = (status: Order['status'], paymentId?: string): Order => ({
  orderId: '0000002a-0000-8000-8000-000000000001',
  saleId: 42,
  itemId: 7,
  userId: 'ann',
  status,
  priceMinor: 2499,
  paymentDeadline: '2026-12-07T10:00:00.000Z',
  ...(paymentId && { paymentId }),
});

test.each([
  ['the payment that paid it', order('PAID', 'p-1'), { paymentId: 'p-1', amount: 2499 }, { status: 'PAID', paymentId: 'p-1' }],
  ['another payment of a paid order', order('PAID', 'p-1'), { paymentId: 'p-2', amount: 2499 }, { error: 'ORDER_NOT_PENDING' }],
  ['the payment that paid it, another amount', order('PAID', 'p-1'), { paymentId: 'p-1', amount: 1 }, { error: 'AMOUNT_MISMATCH' }],
  ['an expired order', order('EXPIRED'), { paymentId: 'p-3', amount: 2499 }, { error: 'PAYMENT_WINDOW_CLOSED' }],
  ['an order still read PENDING while its unit goes back', order('PENDING'), { paymentId: 'p-3', amount: 2499 }, { error: 'PAYMENT_WINDOW_CLOSED' }],
  ['a cancelled order', order('CANCELLED'), { paymentId: 'p-4', amount: 2499 }, { error: 'ORDER_CANCELLED' }],
  ['a rejected order', order('REJECTED'), { paymentId: 'p-5', amount: 2499 }, { error: 'ORDER_NOT_PENDING' }],
])('%s', (_name, o, payment, answer) => {
  expect(endedAnswer(o, payment)).toEqual(answer);
});
