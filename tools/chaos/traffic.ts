/** A run's traffic (a crowd buying and a payment service paying through both APIs) and the campaign's own checks. */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { createSigner } from 'fast-jwt';
import type { Pool } from 'pg';
import { request } from 'undici';
import { readSaleEvents, saleEventsSince } from '../../src/audit';
import { type Config } from '../../src/config';
import type { OrderStatus } from '../../src/order/types';
import { createKafka } from '../../src/infra/kafka';
import { saleGateOf } from '../../test/support/crowd';
import { ReservationStore } from '../../src/reservation/store';
import { type FlashRedis } from '../../src/reservation/client';
import { StartQueue } from '../../src/reservation/startQueue';
import { paidSignal } from '../../src/workflows/definitions';
import { Random } from './random';
import type { Fleet } from './fleet';
import { cancelLater, checkLevers, operate, type CancelSent, type ControlSent, type PressTimes } from './levers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const CROWD_MS = 4000;
/** How long the campaign's payment service retries one payment that gets no final answer. */
const PAY_RETRY_MS = 90_000;
export const SETTLE_TIMEOUT_MS = 180_000;

/** What a run saw: every answer it got, and the order ids it was given. */
export interface Observed {
  accepted: string[];
  /** Orders whose reservation a shard loss took (redis-shard-loss): those not yet stored in PostgreSQL are gone. */
  lostWithShard: Set<string>;
  fiveHundreds: string[];
  payments: { orderId: string; paymentId: string; channel: 'route' | 'signal'; outcome: string }[];
  cancels: CancelSent[];
  controls: ControlSent[];
  /** When each 202's press was sent and answered (checkLevers). */
  presses: PressTimes[];
}

export interface Clients {
  config: Config;
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  temporal: Client;
}

/** One HTTP call that never throws: a network error (a killed API) is status 0. Records 5xx without Retry-After. */
async function call(url: string, init: { method: string; headers: Record<string, string>; body?: string }, seen: Observed): Promise<{ status: number; body: Record<string, unknown> }> {
  try {
    const res = await request(url, { ...init, headersTimeout: 20_000, bodyTimeout: 20_000 });
    const text = await res.body.text();
    if (res.statusCode >= 500 && !(res.statusCode === 503 && res.headers['retry-after'])) seen.fiveHundreds.push(`${init.method} ${url} → ${res.statusCode} ${text}`);
    try {
      return { status: res.statusCode, body: JSON.parse(text) as Record<string, unknown> };
    } catch {
      return { status: res.statusCode, body: {} };
    }
  } catch {
    return { status: 0, body: {} };
  }
}

/**
 * The campaign's payment service: pays an accepted order after a random wait, through the route (each try to the
 * next API's internal door) or the `paid` signal, sometimes first with a wrong amount, sometimes twice.
 */
function payer(rng: Random, clients: Clients, fleet: Fleet, priceMinor: number, windowMs: number, seen: Observed) {
  const { config } = clients;
  return async (orderId: string) => {
    const paymentId = `pay-${orderId}`;
    const channel = rng.chance(0.7) ? 'route' : 'signal';
    const wrongFirst = channel === 'route' && rng.chance(0.1);
    const twice = rng.chance(0.15);
    const first = rng.int(0, 1);
    await sleep(rng.int(200, Math.floor(windowMs * 1.3)));
    // As a payment service behind a load balancer: each try to the next API, for up to PAY_RETRY_MS (an API
    // killed while PostgreSQL is away takes that long to come back). No draw from rng: the plan stays the seed's.
    const attempt = async (amount: number): Promise<string> => {
      const until = Date.now() + PAY_RETRY_MS;
      let last = 'no try';
      for (let tries = 0; Date.now() < until; tries++) {
        if (channel === 'signal') {
          try {
            await clients.temporal.workflow.getHandle(orderId).signal(paidSignal, { paymentId, amount });
            return 'signalled';
          } catch (err) {
            // Not started yet, or ended: a payment service tries again, then gives up once the order is final.
            const row = await clients.pool.query<{ status: OrderStatus }>('SELECT status FROM orders WHERE id = $1', [orderId]).catch(() => ({ rows: [] as { status: OrderStatus }[] }));
            if (err instanceof WorkflowNotFoundError && row.rows[0] && row.rows[0].status !== 'PENDING') return 'not-delivered';
          }
        } else {
          // The payment route is on each API's internal door.
          const url = `http://${config.INTERNAL_API_HOST}:${fleet.apis[(first + tries) % fleet.apis.length].internalPort}`;
          const reply = await call(`${url}/api/flash-sales/orders/${orderId}/payment`, {
            method: 'POST',
            headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
            body: JSON.stringify({ paymentId, amount }),
          }, seen);
          if (reply.status !== 0 && reply.status < 500) return reply.status === 200 ? '200' : `${reply.status} ${String(reply.body.error)}`;
          last = reply.status ? `${reply.status} ${String(reply.body.error)}` : 'no answer';
        }
        await sleep(500);
      }
      return `gave up (last: ${last})`;
    };
    if (wrongFirst) seen.payments.push({ orderId, paymentId: `${paymentId}-wrong`, channel, outcome: await attempt(priceMinor - 1) });
    seen.payments.push({ orderId, paymentId, channel, outcome: await attempt(priceMinor) });
    if (twice) seen.payments.push({ orderId, paymentId, channel, outcome: await attempt(priceMinor) });
  };
}

/** Runs the crowd, the payments, the cancels and the operator's controls of one run (its faults run beside). */
export async function trade(rng: Random, clients: Clients, fleet: Fleet, sale: { saleId: number; items: { itemId: number }[] }, units: number, priceMinor: number, windowMs: number, seen: Observed): Promise<void> {
  const { config } = clients;
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 });
  const buyers = units * 2 + rng.int(0, 10);
  const presses: { token: string; itemId: number; atMs: number }[] = [];
  for (let b = 0; b < buyers; b++) {
    const token = sign({ sub: `chaos-${sale.saleId}-${b}` });
    const itemId = rng.pick(sale.items).itemId;
    presses.push({ token, itemId, atMs: rng.int(0, CROWD_MS) });
    if (rng.chance(0.2)) presses.push({ token, itemId, atMs: rng.int(0, CROWD_MS) });
    if (rng.chance(0.1)) presses.push({ token, itemId: rng.pick(sale.items).itemId, atMs: rng.int(0, CROWD_MS) });
  }
  const apiUrl = () => `http://${config.API_HOST}:${rng.pick(fleet.apis).port}`;
  // Read as the sale page reads it, before the crowd presses (no draw from rng: the seed's plan stays the same).
  const gate = await saleGateOf(`http://${config.API_HOST}:${fleet.apis[0].port}`, sale.saleId, Date.now() + 60_000);
  const pay = payer(rng, clients, fleet, priceMinor, windowMs, seen);
  // Payments and cancels under way; a cancel's buyer may buy again, whose order may be paid or cancelled in turn.
  const pending: Promise<void>[] = [operate(rng, config, fleet, sale.saleId, CROWD_MS, seen.controls)];
  const start = Date.now();

  const press = async (token: string, itemId: number): Promise<void> => {
    for (let tries = 0; tries < 20; tries++) {
      const sentAt = Date.now();
      const reply = await call(`${apiUrl()}/api/flash-sales/items/${itemId}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'sale-gate': gate } }, seen);
      if (reply.status === 202) {
        const orderId = reply.body.orderId as string;
        seen.accepted.push(orderId);
        seen.presses.push({ orderId, sentAt, answeredAt: Date.now() });
        if (rng.chance(0.6)) pending.push(pay(orderId));
        if (rng.chance(0.15)) pending.push(cancelLater(rng, config, fleet, orderId, token, windowMs, seen.cancels, () => press(token, itemId)));
        return;
      }
      // A buyer presses again after an outage or a pause (no answer, or 503); any other answer is final.
      if (reply.status !== 0 && reply.status !== 503) return;
      await sleep(300);
    }
  };
  await Promise.all(
    rng.shuffle(presses).map(async (p) => {
      await sleep(Math.max(0, start + p.atMs - Date.now()));
      await press(p.token, p.itemId);
    }),
  );
  while (pending.length) await Promise.all(pending.splice(0));
}

/**
 * The campaign's own rules for a settled run, beside the audit: every 202's order final; every 200 from the
 * payment route a PAID order with that payment, holding its unit; every refusal an order whose unit came back
 * (or, refused as not pending, one paid by another payment); every delivered signal either paid the order or
 * was refunded on Kafka; no 5xx but 503 with Retry-After; no more 202s than the stock plus the units that
 * came back.
 */
export async function checkRun(clients: Clients, saleId: number, quantity: number, seen: Observed, gone: ReadonlySet<string>): Promise<string[]> {
  const violations: string[] = [];
  const rows = (
    await clients.pool.query<{ id: string; status: OrderStatus; paymentId: string | null }>(
      'SELECT id, status, payment_id AS "paymentId" FROM orders WHERE sale_id = $1',
      [saleId],
    )
  ).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  const held = new Set((await clients.store.view.reservations(saleId)).map((r) => r.orderId));
  for (const id of seen.accepted.filter((id) => !gone.has(id))) {
    const status = byId.get(id)?.status;
    if (status !== 'PAID' && status !== 'EXPIRED' && status !== 'REJECTED' && status !== 'CANCELLED') violations.push(`202 ${id} ended ${status ?? 'with no row'}`);
  }
  const { events } = await readSaleEvents(createKafka(clients.config, `chaos-check-${randomUUID()}`), clients.config.KAFKA_TOPIC, saleId, await saleEventsSince(clients.pool, saleId));
  const refunded = new Set([...events.values()].filter((e) => e.type === 'PaymentRefundRequired').map((e) => `${e.orderId}:${e.paymentId}`));
  for (const p of seen.payments.filter((p) => !gone.has(p.orderId))) {
    const row = byId.get(p.orderId);
    const back = !held.has(p.orderId) && (row?.status === 'EXPIRED' || row?.status === 'REJECTED' || row?.status === 'CANCELLED');
    const ok =
      p.outcome === '200'
        ? row?.status === 'PAID' && row.paymentId === p.paymentId && held.has(p.orderId)
        : p.outcome === '409 PAYMENT_WINDOW_CLOSED'
          ? back
          : p.outcome === '409 ORDER_CANCELLED'
            ? back && row?.status === 'CANCELLED'
          : p.outcome === '409 ORDER_NOT_PENDING'
            ? back || (row?.status === 'PAID' && row.paymentId !== p.paymentId)
            : p.outcome === '422 AMOUNT_MISMATCH'
              ? p.paymentId.endsWith('-wrong')
              : p.outcome === 'signalled'
                ? (row?.status === 'PAID' && row.paymentId === p.paymentId) || refunded.has(`${p.orderId}:${p.paymentId}`)
                : p.outcome === 'not-delivered';
    if (!ok) violations.push(`payment ${p.paymentId} by ${p.channel}: ${p.outcome}, but the order is ${row?.status ?? 'missing'} (${row?.paymentId ?? 'no payment'}, unit ${held.has(p.orderId) ? 'held' : 'back'})`);
  }
  violations.push(...seen.fiveHundreds.map((line) => `5xx without Retry-After: ${line}`));
  const signalled = new Set(seen.payments.filter((p) => p.outcome === 'signalled').map((p) => p.orderId));
  violations.push(...checkLevers({ rows: byId, held, cancels: seen.cancels, controls: seen.controls, presses: seen.presses, gone, signalled }));
  const back = rows.filter((r) => r.status === 'EXPIRED' || r.status === 'REJECTED' || r.status === 'CANCELLED').length;
  // A unit whose order went with a lost shard is counted free again by the rebuild: it may be sold once more.
  if (seen.accepted.length > quantity + back + gone.size) violations.push(`${seen.accepted.length} × 202 > stock ${quantity} + ${back} units back + ${gone.size} gone with a shard`);
  return violations;
}

/**
 * @returns the 202s whose order a shard loss took before any workflow stored it: held by the lost shard, and with
 *   neither a row nor a workflow once the sale settled
 */
export async function goneWithShard(clients: Clients, saleId: number, seen: Observed): Promise<Set<string>> {
  const candidates = seen.accepted.filter((id) => seen.lostWithShard.has(id));
  if (!candidates.length) return new Set();
  const { rows } = await clients.pool.query<{ id: string }>('SELECT id FROM orders WHERE sale_id = $1 AND id = ANY($2)', [saleId, candidates]);
  const stored = new Set(rows.map((r) => r.id));
  const gone = new Set<string>();
  for (const id of candidates) {
    if (stored.has(id)) continue;
    const started = await clients.temporal.workflow.getHandle(id).describe().then(
      () => true,
      (err: unknown) => !(err instanceof WorkflowNotFoundError),
    );
    if (!started) gone.add(id);
  }
  return gone;
}

/** Waits (bounded) until every order of the sale is final in PostgreSQL, no workflow of it runs and no purchase claim is left. */
export async function settled(clients: Clients, saleId: number, accepted: number): Promise<boolean> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  while (Date.now() < deadline) {
    try {
      const { rows } = await clients.pool.query<{ total: number; open: number }>(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'PENDING')::int AS open FROM orders WHERE sale_id = $1`,
        [saleId],
      );
      const { waiting: queued } = await new StartQueue(clients.redis, clients.store.layouts).depth(saleId, Date.now());
      const running = await clients.temporal.workflow.count(`SaleId = ${saleId} AND ExecutionStatus = "Running"`);
      // Claims a failed press left (a dropped connection) are repaired once STARTER_CLAIM_IDLE_MS old.
      const claims = await clients.store.view.claims(saleId);
      if (rows[0].total >= accepted && rows[0].open === 0 && queued === 0 && running.count === 0 && claims.length === 0) return true;
    } catch {
      // A service still coming back: look again.
    }
    await sleep(1000);
  }
  return false;
}

/** A run's sale and faults as its seed draws them (the crowd's and the payments' draws follow on `rng`). */
