/**
 * The demo's payment service: pays an accepted order after a buyer's think time from its 202, through the payment
 * route or the `paid` signal (the payment client's signal-with-start, src/payments/client.ts); retries a 5xx or a network error with the same paymentId (it stays
 * idempotent) until a definitive answer; tallies what became of each payment and how long each attempt took.
 */
import { randomInt } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { Agent, request } from 'undici';
import { internalDoorLookup, PaymentClient } from '../../src/payments/client';
import { newPaymentTally } from './types';

/** Connections the service keeps to the API (its client's pool; payments beyond them queue there). */
const PAYMENT_CONNECTIONS = 128;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface PaymentServiceOptions {
  temporal: Client;
  /** The order workflows' task queue, where a signal-with-start starts an order's workflow. */
  taskQueue: string;
  /** The internal door that takes its payments. */
  paymentsUrl: string;
  token: string;
  priceMinor: number;
  paymentWindowMs: number;
  /** No attempt after this (ms since the epoch). */
  hardStopMs: number;
  /** Share of route checkouts whose charge is declined: reported to the payment-failure route instead. */
  declineShare: number;
}

/** One payment attempt as the service saw it: kept beside the report (payments.jsonl) to line up with the API's log. */
export interface Attempt {
  orderId: string;
  path: 'route' | 'signal';
  sentAtMs: number;
  ms: number;
  status: number;
}

export class PaymentService {
  readonly tally = newPaymentTally();
  /** Orders paid through the signal: what became of the payment is the workflow's to decide, read at the end. */
  readonly signalled: string[] = [];
  readonly paidVia = new Map<string, 'route' | 'signal'>();
  readonly latencies = { route: [] as number[], routeDuringStampede: [] as number[], routeAfterStampede: [] as number[], signal: [] as number[] };
  readonly attempts: Attempt[] = [];
  /** Wave 1's presses are still being sent: a payment's latency counts in the stampede's share. */
  stampeding = false;
  private readonly inFlight: Promise<void>[] = [];
  private readonly signals: PaymentClient;
  // Keep-alive connections, as a service keeps: one new connection per payment in flight overflowed the API's accept queue.
  private readonly agent = new Agent({ connections: PAYMENT_CONNECTIONS, keepAliveTimeout: 60_000 });
  private stopping = false;

  constructor(private readonly o: PaymentServiceOptions) {
    this.signals = new PaymentClient(o.temporal, { taskQueue: o.taskQueue, lookUp: internalDoorLookup(o.paymentsUrl, o.token, 30_000), callTimeoutMs: 30_000 });
  }

  /**
   * @param deadlineMs the order's payment deadline as its 202 showed it (ms since the epoch)
   * @param mayDecline whether a route checkout may be declined (declineShare): wave 1's orders only, so that the
   *   units wave 2 and the buyers' second orders take all end PAID
   */
  pay(orderId: string, deadlineMs: number, viaSignal: boolean, mayDecline = false): void {
    // A buyer takes a couple of seconds or more to pay, and may take up to half of the window.
    const delay = randomInt(2000, Math.max(2001, Math.floor(this.o.paymentWindowMs / 2)));
    if (mayDecline && !viaSignal && Math.random() < this.o.declineShare) {
      this.inFlight.push(sleep(delay).then(() => this.decline(orderId)));
      return;
    }
    this.inFlight.push(sleep(delay).then(() => this.checkout(orderId, deadlineMs, viaSignal)));
  }

  /** Resolves once every payment sent so far, and every task handed to track, has its definitive answer. */
  async settled(): Promise<void> {
    await Promise.all(this.inFlight);
  }

  /** Holds `settled` until the task is done too (the buyers' cancels, whose second orders it pays). */
  track(task: Promise<void>): void {
    this.inFlight.push(task);
  }

  /** Reports the order's charge as declined (the order is then CANCELLED, its unit back), again after a 5xx. */
  private async decline(orderId: string): Promise<void> {
    for (let tries = 1; Date.now() < this.o.hardStopMs && !this.stopping; tries++) {
      try {
        const res = await request(`${this.o.paymentsUrl}/api/flash-sales/orders/${orderId}/payment-failure`, {
          dispatcher: this.agent,
          method: 'POST',
          headers: { authorization: `Bearer ${this.o.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ paymentId: `declined-${orderId}`, declineCode: 'card_declined' }),
        });
        const body = (await res.body.json().catch(() => ({}))) as { error?: string };
        if (res.statusCode < 500) {
          const code = res.statusCode === 200 ? 'CANCELLED' : (body.error ?? `HTTP_${res.statusCode}`);
          this.tally.declined[code] = (this.tally.declined[code] ?? 0) + 1;
          return;
        }
      } catch {
        // No answer: try again.
      }
      this.tally.retried += 1;
      await sleep(Math.min(5000, 250 * tries));
    }
    this.tally.failed += 1;
  }

  /** Stops: no attempt more, the payments in flight end, the connections close. */
  async close(): Promise<void> {
    this.stopping = true;
    await Promise.allSettled(this.inFlight);
    await this.agent.close();
  }

  private async checkout(orderId: string, deadlineMs: number, viaSignal: boolean): Promise<void> {
    // The checkout closes at the deadline: a buyer back later is not charged, so there is nothing to report.
    if (Date.now() >= deadlineMs) {
      this.tally.checkoutClosed[viaSignal ? 'signal' : 'route'] += 1;
      return;
    }
    this.paidVia.set(orderId, viaSignal ? 'signal' : 'route');
    for (let tries = 1; Date.now() < this.o.hardStopMs && !this.stopping; tries++) {
      const outcome = await this.attempt(orderId, viaSignal);
      if (outcome === 'SIGNALLED') {
        this.signalled.push(orderId);
        return;
      }
      if (outcome !== 'retry') {
        this.tally.route[outcome] = (this.tally.route[outcome] ?? 0) + 1;
        return;
      }
      this.tally.retried += 1;
      await sleep(Math.min(5000, 250 * tries));
    }
    this.tally.failed += 1;
  }

  /** @returns 'retry', or the definitive answer: the route's error code ('PAID' on 200), or 'SIGNALLED' */
  private async attempt(orderId: string, viaSignal: boolean): Promise<string> {
    const payment = { paymentId: `pay-${orderId}`, amount: this.o.priceMinor };
    const t0 = performance.now();
    const sentAtMs = Date.now();
    const during = this.stampeding;
    const took = (status = 0) => {
      const ms = performance.now() - t0;
      this.attempts.push({ orderId, path: viaSignal ? 'signal' : 'route', sentAtMs, ms: Math.round(ms * 10) / 10, status });
      this.latencies[viaSignal ? 'signal' : 'route'].push(ms);
      if (!viaSignal) this.latencies[during ? 'routeDuringStampede' : 'routeAfterStampede'].push(ms);
    };
    try {
      if (viaSignal) {
        const answer = await this.signals.signalPaid(orderId, payment);
        took();
        // Delivered, or its workflow had ended: the order's row says what became of it (read at the end).
        return 'error' in answer ? answer.error : 'SIGNALLED';
      }
      const res = await request(`${this.o.paymentsUrl}/api/flash-sales/orders/${orderId}/payment`, {
        dispatcher: this.agent,
        method: 'POST',
        headers: { authorization: `Bearer ${this.o.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(payment),
      });
      const body = (await res.body.json().catch(() => ({}))) as { error?: string };
      took(res.statusCode);
      if (res.statusCode === 503) {
        this.tally.unavailable += 1;
        if (res.headers['retry-after'] !== undefined) this.tally.unavailableWithRetryAfter += 1;
      }
      if (res.statusCode === 200) return 'PAID';
      return res.statusCode >= 500 ? 'retry' : (body.error ?? `HTTP_${res.statusCode}`);
    } catch {
      took();
      return 'retry';
    }
  }
}
