/**
 * The activities (src/activities/index.ts) in Temporal's MockActivityEnvironment, over fakes of the order's store
 * and the reservations: which store call each makes, the event it queues itself (the transitions' events are their
 * statements', src/order/outbox.ts), what it answers, and which failures are business outcomes (non-retryable)
 * rather than retries. The real stores: test/activities/activities.test.ts.
 */
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../../src/activities';
import type { OrderEvent } from '../../src/order/events';
import { issueReceipt, RECEIPT_MAX_AGE_MS } from '../../src/order/receipt';
import type { CancelOutcome, PayOutcome } from '../../src/order/store';
import type { OrderInput, Outcome, Payment } from '../../src/order/types';

const order: OrderInput = {
  orderId: '0000002a-1234-8abc-9def-123456789abc',
  saleId: 42,
  itemId: 7,
  userId: 'alice',
  priceMinor: 1999,
  paymentWindowMs: 600_000,
  reservedAtMs: Date.parse('2026-12-06T10:00:00Z'),
  stockShard: 0,
  unit: 3,
  stockEpoch: 1,
};
const payment: Payment = { paymentId: 'pay-1', amount: 1999 };
/** The activities' own log lines (a failed activity is logged) are what the assertions check; kept off the output. */
const quiet = new DefaultLogger('ERROR', () => undefined);

/** A store whose answers each test sets, recording its calls. */
function fakes(answers: { stored?: Outcome; place?: Outcome | Error; pay?: PayOutcome; cancel?: CancelOutcome; settle?: Outcome | undefined }, extra: Pick<ActivityDeps, 'receiptSecret' | 'signalledAt'> = {}) {
  const calls: string[] = [];
  const judgedAt: (number | undefined)[] = [];
  const published: OrderEvent[] = [];
  const released: [string, boolean][] = [];
  const deps: ActivityDeps = {
    orders: {
      terms: async () => {
        calls.push('terms');
        return undefined;
      },
      stored: async () => {
        calls.push('stored');
        return answers.stored;
      },
      place: async () => {
        calls.push('place');
        if (answers.place instanceof Error) throw answers.place;
        return answers.place ?? { status: 'PENDING' };
      },
      pay: (async (_id: string, _payment: Payment, _order: OrderInput, receivedAtMs?: number) => {
        calls.push('pay');
        judgedAt.push(receivedAtMs);
        return answers.pay ?? { error: 'ORDER_NOT_PENDING' };
      }) as ActivityDeps['orders']['pay'],
      cancel: async () => {
        calls.push('cancel');
        return answers.cancel;
      },
      settle: async () => {
        calls.push('settle');
        return answers.settle;
      },
      queueEvent: async (event) => {
        published.push(event);
      },
    },
    reservations: {
      release: async (o, unitBack) => {
        released.push([o.orderId, unitBack ?? true]);
      },
    },
    ...extra,
  };
  return { activities: createActivities(deps), calls, judgedAt, published, released, env: new MockActivityEnvironment(undefined, { logger: quiet }) };
}

const types = (events: OrderEvent[]) => events.map((e) => e.type);

describe('placeOrder', () => {
  test('a row the starter stored is read, not inserted again (its OrderPlaced was queued with it); its outcome answered', async () => {
    const { activities, calls, published, env } = fakes({ stored: { status: 'PENDING' } });
    await expect(env.run(activities.placeOrder, order)).resolves.toEqual({ status: 'PENDING' });
    expect(calls).toEqual(['stored']);
    expect(published).toEqual([]);
  });

  test('no row: the order is placed; a refusal is an answer (REJECTED), queuing nothing itself', async () => {
    const { activities, calls, published, env } = fakes({ place: { status: 'REJECTED', reason: 'SOLD_OUT' } });
    await expect(env.run(activities.placeOrder, order)).resolves.toEqual({ status: 'REJECTED', reason: 'SOLD_OUT' });
    expect(calls).toEqual(['stored', 'place']);
    expect(published).toEqual([]);
  });

  test('a row PostgreSQL cannot store at all (a constraint violation) fails non-retryably, publishing nothing', async () => {
    const violation = Object.assign(new Error('new row violates check constraint'), { code: '23514' });
    const { activities, published, env } = fakes({ place: violation });
    const failure = await env.run(activities.placeOrder, order).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ type: 'CONSTRAINT_VIOLATION', nonRetryable: true });
    expect(published).toEqual([]);
  });

  test('PostgreSQL away is thrown as it is, for the activity to be retried', async () => {
    const away = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const { activities, env } = fakes({ place: away });
    await expect(env.run(activities.placeOrder, order)).rejects.toBe(away);
  });
});

describe('payOrder', () => {
  test('PAID is answered with the payment id, the store called with the terms (its statement queues OrderPaid)', async () => {
    const { activities, calls, published, env } = fakes({ pay: { status: 'PAID', paymentId: 'pay-1', stored: true } });
    await expect(env.run(activities.payOrder, order, payment)).resolves.toEqual({ status: 'PAID', paymentId: 'pay-1' });
    expect(calls).toEqual(['pay']);
    expect(published).toEqual([]);
  });

  test('a refusal is answered and queues nothing', async () => {
    const { activities, published, env } = fakes({ pay: { error: 'PAYMENT_WINDOW_CLOSED' } });
    await expect(env.run(activities.payOrder, order, payment)).resolves.toEqual({ error: 'PAYMENT_WINDOW_CLOSED' });
    expect(published).toEqual([]);
  });

  test("a receipt older than RECEIPT_MAX_AGE_MS by the task's clock is counted to its signal's arrival, read from the run's history", async () => {
    const secret = 'receipt-secret-of-this-test';
    const stampMs = order.reservedAtMs + 20_000;
    const stamped = { ...payment, receipt: issueReceipt(secret, order.orderId, payment, stampMs) };
    const taskMs = stampMs + RECEIPT_MAX_AGE_MS + 30_000;
    const arrivals: Record<string, number | undefined> = { 'in time': stampMs + 1500, 'too late': stampMs + RECEIPT_MAX_AGE_MS + 1, 'no signal': undefined };
    const asked: string[] = [];
    for (const [name, arrived] of Object.entries(arrivals)) {
      const { activities, judgedAt, env } = fakes({ pay: { status: 'PAID', paymentId: 'pay-1' } }, { receiptSecret: secret, signalledAt: async (orderId, p) => (asked.push(`${orderId} ${p.paymentId}`), arrived) });
      await env.run(activities.payOrder, order, stamped, taskMs);
      expect({ name, judgedAt }).toEqual({ name, judgedAt: [name === 'in time' ? stampMs : taskMs] });
    }
    expect(asked).toEqual(Object.keys(arrivals).map(() => `${order.orderId} pay-1`));
    // A receipt young enough by the task's clock, or none at all: the history is not read.
    const { activities, judgedAt, env } = fakes({ pay: { status: 'PAID', paymentId: 'pay-1' } }, { receiptSecret: secret, signalledAt: async () => Promise.reject(new Error('not asked')) });
    await env.run(activities.payOrder, order, stamped, stampMs + 1000);
    await env.run(activities.payOrder, order, payment, taskMs);
    expect(judgedAt).toEqual([stampMs, taskMs]);
  });
});

describe('cancelOrder', () => {
  test('CANCELLED is answered with the reason PostgreSQL keeps (the first cancel\'s), without the order', async () => {
    const { activities, published, env } = fakes({ cancel: { status: 'CANCELLED', reason: 'BUYER', order } });
    await expect(env.run(activities.cancelOrder, order, 'OPERATOR' as const)).resolves.toEqual({ status: 'CANCELLED', reason: 'BUYER' });
    expect(published).toEqual([]);
  });

  test('a refusal (paid first) is answered and queues nothing; no row fails non-retryably', async () => {
    const refused = fakes({ cancel: { error: 'ORDER_ALREADY_PAID' } });
    await expect(refused.env.run(refused.activities.cancelOrder, order, 'BUYER' as const)).resolves.toEqual({ error: 'ORDER_ALREADY_PAID' });
    expect(refused.published).toEqual([]);
    const none = fakes({});
    await expect(none.env.run(none.activities.cancelOrder, order, 'BUYER' as const)).rejects.toMatchObject({ type: 'ORDER_NOT_FOUND', nonRetryable: true });
  });
});

describe('settleOrder', () => {
  test.each([
    { status: 'EXPIRED' as const },
    { status: 'PAID' as const, paymentId: 'pay-9' },
    { status: 'REJECTED' as const, reason: 'STOCK_REBUILT' },
    { status: 'CANCELLED' as const, reason: 'BUYER' },
    { status: 'PENDING' as const },
  ])('%o is answered as the store settled it, queuing nothing itself', async (settled) => {
    const { activities, calls, published, env } = fakes({ settle: settled });
    await expect(env.run(activities.settleOrder, order, Date.now())).resolves.toEqual(settled);
    expect(calls).toEqual(['settle']);
    expect(published).toEqual([]);
  });

  test('an order without a row fails non-retryably ORDER_NOT_FOUND', async () => {
    const { activities, env } = fakes({ settle: undefined });
    await expect(env.run(activities.settleOrder, order, Date.now())).rejects.toMatchObject({ type: 'ORDER_NOT_FOUND', nonRetryable: true });
  });
});

test('rejectUnstored queues OrderRejected with the reason (no row holds a statement to queue it) and answers REJECTED', async () => {
  const { activities, published, env } = fakes({});
  await expect(env.run(activities.rejectUnstored, order, 'CONSTRAINT_VIOLATION')).resolves.toEqual({ status: 'REJECTED', reason: 'CONSTRAINT_VIOLATION' });
  expect(types(published)).toEqual(['OrderRejected']);
  expect(published[0]).toMatchObject({ orderId: order.orderId, reason: 'CONSTRAINT_VIOLATION', eventId: `${order.orderId}:OrderRejected` });
});

test('publishEvent queues the refund it is given as it is', async () => {
  const { activities, published, env } = fakes({});
  const refund: OrderEvent = { eventId: `${order.orderId}:PaymentRefundRequired:p-9`, type: 'PaymentRefundRequired', version: 1, occurredAt: '2026-12-06T10:00:00.000Z', orderId: order.orderId, saleId: 42, itemId: 7, userId: 'alice', paymentId: 'p-9', amount: 5, reason: 'AMOUNT_MISMATCH' };
  await env.run(activities.publishEvent, refund);
  expect(published).toEqual([refund]);
});

test.each([true, false])('releaseUnit hands the release its flag as it is (unitBack %s)', async (unitBack) => {
  const { activities, released, env } = fakes({});
  await env.run(activities.releaseUnit, order, unitBack);
  expect(released).toEqual([[order.orderId, unitBack]]);
});
