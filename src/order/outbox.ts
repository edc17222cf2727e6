/**
 * The transactional outbox of order events (docs/design.md, "Events"): each transition's statement writes its
 * event into `order_outbox` with the row it changes, and OutboxRelay publishes them to Kafka in id order, so that
 * no order waits for the broker (I4: deadlines settle and units come back whatever Kafka's state) and the events
 * follow once it answers, in each order's order (I5).
 */
import type { Pool, PoolClient } from 'pg';
import type { Logger } from '../infra/logger';
import type { OrderEvent, OrderEventType } from './events';
import type { StoredEvent } from './publisher';
import { PAYMENT_ID } from './types';

/** An event's time as OrderEvent writes it (ISO-8601 UTC, ms), from the statement's own clock. */
const OCCURRED_AT = `to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * One event per row of `source`, as a SELECT of the outbox's columns, for outboxInsert.
 * @param source a CTE whose rows are orders: RETURNING id, sale_id, item_id, user_id (and what `extra` reads)
 * @param n the event's place among those the statement writes (the order they are published in)
 * @param extra OrderEvent's optional fields as SQL expressions over `s` (the source row) or parameters
 */
export function eventOf(source: string, type: Exclude<OrderEventType, 'PaymentRefundRequired'>, n: number, extra: Partial<Record<'paymentId' | 'amount' | 'reason', string>> = {}): string {
  const fields = Object.entries(extra).map(([name, sql]) => `, '${name}', ${sql}`).join('');
  return `SELECT ${n} AS n, '${type}' AS type, s.id AS order_id, s.item_id,
    json_build_object('eventId', s.id::text || ':${type}', 'type', '${type}', 'version', 1, 'occurredAt', ${OCCURRED_AT},
      'orderId', s.id, 'saleId', s.sale_id, 'itemId', s.item_id, 'userId', s.user_id${fields})::text AS payload
    FROM ${source} s`;
}

/**
 * The outbox insert of a transition's events, a CTE body for the transition's own statement.
 * @param events eventOf SELECTs; only those whose source returned rows write
 * @param traceParent the parameter holding the writer's traceparent (or NULL)
 */
export function outboxInsert(events: string[], traceParent: string): string {
  return `INSERT INTO order_outbox (type, order_id, item_id, payload, trace_parent)
    SELECT e.type, e.order_id, e.item_id, e.payload, ${traceParent}::text FROM (${events.join(' UNION ALL ')}) e ORDER BY e.n`;
}

/**
 * Queues an event made outside a transition's statement: an order PostgreSQL would not store at all, or a refund.
 * A refund carries its payment id, by which the relay drops it if that payment paid an order by then; an id no
 * payment can have (not a PAYMENT_ID, e.g. with a NUL byte, which PostgreSQL's text refuses) is kept in the event
 * only, escaped in its JSON.
 */
export async function queueEvent(pool: Pool, event: OrderEvent, traceParent?: string): Promise<void> {
  const paymentId = event.type === 'PaymentRefundRequired' && event.paymentId && PAYMENT_ID.test(event.paymentId) ? event.paymentId : null;
  await pool.query('INSERT INTO order_outbox (type, order_id, item_id, payment_id, payload, trace_parent) VALUES ($1, $2, $3, $4, $5, $6)', [
    event.type,
    event.orderId,
    event.itemId,
    paymentId,
    JSON.stringify(event),
    traceParent ?? null,
  ]);
}

/** The relay's advisory lock: one relay publishes at a time, whatever the number of workers (per database). */
const RELAY_LOCK = "hashtext('flash-sale:order-outbox')";
/** Events read, published and deleted per round. */
const BATCH = 500;
/** Waits of the relay (ms): after an empty round, between tries of the lock another relay holds, after a failure. */
const IDLE_MS = 100;
const STANDBY_MS = 1000;
const FAILED_MS = 1000;
const STOP_WAIT_MS = 5000;

/** What the relay needs of the publisher: events stored as text, sent in order, each resolved once the broker has it. */
export interface EventSink {
  publishStored(events: StoredEvent[]): Promise<void>;
}

/**
 * Publishes the outbox's events in id order and deletes each once the broker has it. One relay at a time holds the
 * outbox (an advisory lock on a connection of its own); the others stand by. A relay that dies between a publish and
 * its delete publishes those events again: consumers drop the copy by eventId (I5).
 */
export class OutboxRelay {
  private running = false;
  private loop: Promise<void> | undefined;
  private lead: PoolClient | undefined;
  private wake: (() => void) | undefined;
  private lastFailureLog = 0;

  constructor(
    private readonly pool: Pool,
    private readonly sink: EventSink,
    private readonly log: Logger,
  ) {}

  /** Starts relaying (idempotent). */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /**
   * Stops after the round under way, waiting for it at most STOP_WAIT_MS (a round waits for the broker for as long
   * as it is away), and gives the outbox up: what it had not deleted is published by the next relay.
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await Promise.race([this.loop, new Promise((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref())]);
    this.dropLead();
  }

  private async run(): Promise<void> {
    while (this.running) {
      let waitMs = 0;
      try {
        const lead = await this.leadClient();
        if (!lead) waitMs = STANDBY_MS;
        else if ((await this.relay(lead)) < BATCH) waitMs = IDLE_MS;
      } catch (err) {
        this.dropLead(err as Error);
        waitMs = FAILED_MS;
        if (Date.now() - this.lastFailureLog >= 10_000) {
          this.lastFailureLog = Date.now();
          this.log.warn({ err: (err as Error).message }, 'order events not relayed to Kafka; trying again');
        }
      }
      if (waitMs && this.running) await this.sleep(waitMs);
    }
    this.dropLead();
  }

  /** @returns the connection holding the outbox's lock, or undefined while another relay holds it */
  private async leadClient(): Promise<PoolClient | undefined> {
    if (this.lead) return this.lead;
    const client = await this.pool.connect();
    try {
      const res = await client.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(${RELAY_LOCK}) AS locked`);
      if (!res.rows[0].locked) {
        client.release();
        return undefined;
      }
    } catch (err) {
      client.release(err as Error);
      throw err;
    }
    this.lead = client;
    return client;
  }

  /** Ends the lead's session (its lock with it): a failed connection is thrown away, a healthy one unlocked. */
  private dropLead(err?: Error): void {
    const lead = this.lead;
    this.lead = undefined;
    if (!lead) return;
    // Released with an error, the pool closes the connection, which ends the lock; without, it would keep it.
    lead.release(err ?? new Error('relay stopped'));
  }

  /** One round: up to BATCH events published in order, then deleted. @returns how many were read */
  private async relay(lead: PoolClient): Promise<number> {
    const res = await lead.query<{ id: string; type: OrderEventType; order_id: string; item_id: number; payment_id: string | null; payload: string; trace_parent: string | null }>(
      'SELECT id, type, order_id, item_id, payment_id, payload, trace_parent FROM order_outbox ORDER BY id LIMIT $1',
      [BATCH],
    );
    const rows = res.rows;
    if (!rows.length) return 0;
    // A refund is decided when it is published: money that paid an order by then is that order's, not refunded.
    const refunds = rows.flatMap((r) => (r.payment_id ? [r.payment_id] : []));
    const paid = refunds.length
      ? new Set((await lead.query<{ payment_id: string }>('SELECT payment_id FROM payments WHERE payment_id = ANY($1)', [refunds])).rows.map((r) => r.payment_id))
      : new Set<string>();
    const send = rows.filter((r) => !(r.payment_id && paid.has(r.payment_id)));
    if (send.length < rows.length) this.log.info({ dropped: rows.length - send.length }, 'refunds dropped: their payments paid an order');
    const stored = send.map((r) => ({ eventId: (JSON.parse(r.payload) as OrderEvent).eventId, type: r.type, orderId: r.order_id, itemId: r.item_id, payload: r.payload, traceParent: r.trace_parent ?? undefined }));
    await this.sink.publishStored(stored);
    await lead.query('DELETE FROM order_outbox WHERE id = ANY($1)', [rows.map((r) => r.id)]);
    return rows.length;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    }).finally(() => (this.wake = undefined));
  }
}
