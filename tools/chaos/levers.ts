/**
 * The levers among a run's traffic: buyers who cancel (and may buy again), a payment service that reports
 * declined charges, and an operator who pauses and resumes the sale during the crowd (one in five runs also ends
 * it at the crowd's end); and the campaign's rules for what they were answered.
 */
import { request } from 'undici';
import type { Config } from '../../src/config';
import type { OrderStatus } from '../../src/order/types';
import type { Fleet } from './fleet';
import type { Random } from './random';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** How long a lever is sent again while it gets no final answer (a killed API, a store away). */
const LEVER_RETRY_MS = 90_000;

/** A cancel the run sent, and its final answer ('200', '409 CODE', or 'gave up'). */
export interface CancelSent {
  orderId: string;
  by: 'buyer' | 'payment-failure';
  outcome: string;
}

/** A control the run sent: when its request left and when its 200 came back (none: it gave up). */
export interface ControlSent {
  action: 'pause' | 'resume' | 'end';
  sentAt: number;
  answeredAt?: number;
}

/** A 202's press: when it was sent and answered. */
export interface PressTimes {
  orderId: string;
  sentAt: number;
  answeredAt: number;
}

/** Sends one request to the APIs in turn until an answer that is not a 5xx, for up to LEVER_RETRY_MS. */
async function retried(urls: () => string, path: string, token: string, body?: object): Promise<{ status: number; error?: string }> {
  const until = Date.now() + LEVER_RETRY_MS;
  let last = { status: 0 } as { status: number; error?: string };
  while (Date.now() < until) {
    try {
      const res = await request(`${urls()}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, ...(body && { 'content-type': 'application/json' }) },
        body: body && JSON.stringify(body),
        headersTimeout: 20_000,
        bodyTimeout: 20_000,
      });
      const parsed = (await res.body.json().catch(() => ({}))) as { error?: string };
      last = { status: res.statusCode, error: parsed.error };
      if (res.statusCode < 500) return last;
    } catch {
      last = { status: 0 };
    }
    await sleep(500);
  }
  return { status: -1, error: `gave up (last ${last.status} ${last.error ?? ''})` };
}

const outcomeOf = (answer: { status: number; error?: string }) => (answer.status === 200 ? '200' : answer.status === -1 ? String(answer.error) : `${answer.status} ${answer.error}`);

/**
 * Cancels an accepted order at a random moment of its window: its buyer on the public door, or (one in three)
 * the payment service reporting a declined charge on the internal door.
 * @param buyAgain presses again for the buyer after a 200 (their next order), as a buyer who picked the wrong size
 */
export async function cancelLater(rng: Random, config: Config, fleet: Fleet, orderId: string, buyerToken: string, windowMs: number, cancels: CancelSent[], buyAgain: () => Promise<void>): Promise<void> {
  const by = rng.chance(1 / 3) ? 'payment-failure' : 'buyer';
  const again = rng.chance(0.5);
  const first = rng.int(0, fleet.apis.length - 1);
  await sleep(rng.int(100, Math.floor(windowMs * 1.1)));
  let turn = first;
  const next = () => fleet.apis[turn++ % fleet.apis.length];
  const answer =
    by === 'buyer'
      ? await retried(() => `http://${config.API_HOST}:${next().port}`, `/api/flash-sales/orders/${orderId}/cancel`, buyerToken)
      : await retried(() => `http://${config.INTERNAL_API_HOST}:${next().internalPort}`, `/api/flash-sales/orders/${orderId}/payment-failure`, config.PAYMENT_SERVICE_TOKEN, {
          paymentId: `declined-${orderId}`,
          declineCode: 'insufficient_funds',
        });
  cancels.push({ orderId, by, outcome: outcomeOf(answer) });
  if (answer.status === 200 && again) await buyAgain();
}

/**
 * The operator's levers during the crowd: a pause at a random moment, a resume 0.3–1.5 s after its answer, and
 * (one run in five) an end once the crowd is over.
 */
export async function operate(rng: Random, config: Config, fleet: Fleet, saleId: number, crowdMs: number, controls: ControlSent[]): Promise<void> {
  const pauseAt = rng.int(200, crowdMs - 500);
  const pausedFor = rng.int(300, 1500);
  const ends = rng.chance(0.2);
  const first = rng.int(0, fleet.apis.length - 1);
  let turn = first;
  const url = () => `http://${config.INTERNAL_API_HOST}:${fleet.apis[turn++ % fleet.apis.length].internalPort}`;
  const send = async (action: ControlSent['action']) => {
    const sentAt = Date.now();
    const answer = await retried(url, `/api/admin/sales/${saleId}/${action}`, config.ADMIN_TOKEN);
    controls.push({ action, sentAt, ...(answer.status === 200 && { answeredAt: Date.now() }) });
  };
  await sleep(pauseAt);
  await send('pause');
  await sleep(pausedFor);
  await send('resume');
  if (!ends) return;
  await sleep(Math.max(0, crowdMs - pauseAt - pausedFor));
  await send('end');
}

/** What checkLevers judges: the orders at rest and what the campaign sent and was answered. */
export interface LeversSeen {
  rows: ReadonlyMap<string, { status: OrderStatus }>;
  /** Orders whose unit Redis holds at rest. */
  held: ReadonlySet<string>;
  cancels: readonly CancelSent[];
  controls: readonly ControlSent[];
  presses: readonly PressTimes[];
  /** Orders lost with a shard: not judged. */
  gone: ReadonlySet<string>;
  /** Orders a `paid` signal was delivered to. */
  signalled: ReadonlySet<string>;
}

/**
 * The campaign's rules for the levers: a cancel answered 200 left its order CANCELLED with its unit back; a
 * refused one names what won (PAID, EXPIRED, REJECTED); no 202 whose press was sent after a pause's or an end's
 * answer and answered before the next resume was sent (its reservation ran while every shard was closed).
 * A cancel sent after the deadline may meet an order a `paid` signal then pays: the signal is judged when
 * Temporal received it (docs/design.md, "Payments before the start"), so that order ends PAID.
 * @returns one line per violation
 */
export function checkLevers(seen: LeversSeen): string[] {
  const { rows, held, cancels, controls, presses, gone, signalled } = seen;
  const violations: string[] = [];
  const expected: Record<string, (orderId: string, status: OrderStatus | undefined, unitHeld: boolean) => boolean> = {
    '200': (_, s, h) => s === 'CANCELLED' && !h,
    '409 ORDER_ALREADY_PAID': (_, s) => s === 'PAID',
    '409 PAYMENT_WINDOW_CLOSED': (id, s, h) => (s === 'EXPIRED' && !h) || (s === 'PAID' && signalled.has(id)),
    '409 ORDER_NOT_PENDING': (_, s) => s === 'REJECTED',
  };
  for (const c of cancels.filter((c) => !gone.has(c.orderId))) {
    const status = rows.get(c.orderId)?.status;
    const rule = expected[c.outcome];
    if (!rule || !rule(c.orderId, status, held.has(c.orderId))) violations.push(`cancel of ${c.orderId} by ${c.by}: ${c.outcome}, but the order is ${status ?? 'missing'} (unit ${held.has(c.orderId) ? 'held' : 'back'})`);
  }
  const closings = controls.filter((c) => c.action !== 'resume' && c.answeredAt !== undefined);
  for (const closing of closings) {
    const reopened = controls.find((c) => c.action === 'resume' && c.sentAt > (closing.answeredAt as number))?.sentAt ?? Infinity;
    const late = presses.filter((p) => p.sentAt > (closing.answeredAt as number) && p.answeredAt < reopened);
    violations.push(...late.map((p) => `202 ${p.orderId} pressed ${p.sentAt - (closing.answeredAt as number)} ms after the ${closing.action}'s answer`));
  }
  return violations;
}
