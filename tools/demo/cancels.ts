/**
 * The demo's buyers who change their mind: a think time after their 202 they cancel their order on the public door
 * (POST /orders/{id}/cancel), and, once it is cancelled, press Buy again for the same item; a 202 of that press is
 * an order like any other (handed to the payment service to pay by the route). Tallies the answers of both.
 */
import { randomInt } from 'node:crypto';
import { request } from 'undici';
import { newCancelTally } from './types';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface BuyerCancelsOptions {
  /** The public door. */
  baseUrl: string;
  /** The purchase gate the sale view handed out (header Sale-Gate), if the sale has one. */
  gate: string | undefined;
  paymentWindowMs: number;
  /** No request after this (ms since the epoch). */
  hardStopMs: number;
  /** Called with each order a second press was accepted for, and its payment deadline (ms since the epoch). */
  onAccepted(orderId: string, deadlineMs: number): void;
}

export class BuyerCancels {
  readonly tally = newCancelTally();

  constructor(private readonly o: BuyerCancelsOptions) {}

  /** @returns the cancel and, after a 200, the second press, done (what became of them is in `tally`) */
  async cancel(orderId: string, token: string, itemId: number): Promise<void> {
    // A buyer takes a moment to find they picked the wrong item: within the first third of the window.
    await sleep(randomInt(1000, Math.max(1001, Math.floor(this.o.paymentWindowMs / 3))));
    const cancelled = await this.post(`/api/flash-sales/orders/${orderId}/cancel`, token);
    const code = cancelled.status === 200 ? 'CANCELLED' : (cancelled.error ?? `HTTP_${cancelled.status}`);
    this.tally.cancels[code] = (this.tally.cancels[code] ?? 0) + 1;
    if (cancelled.status !== 200) return;
    const again = await this.post(`/api/flash-sales/items/${itemId}/purchase`, token, this.o.gate);
    const status = String(again.status);
    this.tally.boughtAgain[status] = (this.tally.boughtAgain[status] ?? 0) + 1;
    if (again.status === 202 && again.orderId && again.paymentDeadline) this.o.onAccepted(again.orderId, Date.parse(again.paymentDeadline));
  }

  /** POSTs with the buyer's token, again after a 503 or no answer (the same request is idempotent), until the hard stop. */
  private async post(path: string, token: string, gate?: string): Promise<{ status: number; error?: string; orderId?: string; paymentDeadline?: string }> {
    for (let tries = 1; Date.now() < this.o.hardStopMs; tries++) {
      try {
        const res = await request(`${this.o.baseUrl}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, ...(gate && { 'sale-gate': gate }) } });
        const body = (await res.body.json().catch(() => ({}))) as { error?: string; orderId?: string; paymentDeadline?: string };
        // The body's own `status` (CANCELLED, PENDING) is not the HTTP status: only the fields read are taken.
        if (res.statusCode !== 503) return { status: res.statusCode, error: body.error, orderId: body.orderId, paymentDeadline: body.paymentDeadline };
      } catch {
        // No answer: the API restarting or its accept queue full; try again.
      }
      await sleep(Math.min(5000, 250 * tries));
    }
    return { status: 0, error: 'GAVE_UP' };
  }
}
