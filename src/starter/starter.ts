/**
 * The starter, a role of its own: the API process runs one by default (STARTER_IN_API), and `npm run starter`
 * runs it alone. It reads the sales' start queues (src/reservation/startQueue.ts) through the consumer group,
 * stores each accepted order in PostgreSQL and starts its workflow (workflow id = orderId; an id that exists
 * already counts as started), then acknowledges and deletes the entry (I4). Acceptance rests on Redis; this is
 * where the accepted orders reach PostgreSQL and Temporal, at Temporal's pace (docs/design.md).
 *
 * - At most maxInFlight starts are in flight; entries are read only for free slots.
 * - RESOURCE_EXHAUSTED, UNAVAILABLE and DEADLINE_EXCEEDED pause all reading (exponential back-off, 100 ms to
 *   5 s) and the entry is tried again after the pause. Any other failure leaves the entry pending; it comes
 *   back through the claim below.
 * - Before it reads, it asks its gates (src/starter/gates.ts) how long starts wait and how many may go: by
 *   default the workers' backlog in Temporal (BacklogGate) and this process's pace of acceptance
 *   (AcceptanceGate: no starts while it accepts a stampede).
 * - Entries pending with any starter for claimIdleMs or more are claimed (XAUTOCLAIM): those of a process that
 *   died, and those that failed here. claimIdleMs exceeds a start's deadline, so a start still in flight
 *   elsewhere is not claimed; if one is, its second start finds the workflow and counts as started.
 * - Purchase claims older than claimIdleMs are repaired on a timer of their own (src/starter/claimSweep.ts).
 * - Sales are polled one by one (each on its own key, as Redis Cluster requires), at most POLL_BATCH per turn
 *   and the busiest first: right away when this process has just reserved in the sale, else at an interval
 *   that doubles from 10 ms up to MAX_POLL_MS while a sale's queue stays empty. A sale first seen in the list
 *   is polled at once but counts as idle (MAX_POLL_MS) until a poll finds entries. The sales are the recent ones
 *   (src/sale/sales.ts recentSaleIds) plus those noticed here.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Pool } from 'pg';
import { context } from '@opentelemetry/api';
import type { Config } from '../config';
import { isConstraintViolation } from '../infra/db';
import { Orders } from '../order/store';
import type { OrderInput } from '../order/types';
import type { Logger } from '../infra/logger';
import { repairClaims } from '../reservation/claims';
import type { FlashRedis } from '../reservation/client';
import type { ReservationStore } from '../reservation/store';
import { InvalidEntry } from '../reservation/formats';
import { parseEntry, StartQueue, type QueuedOrder, type RawEntry } from '../reservation/startQueue';
import type { OrderWorkflows } from '../workflows/client';
import { ATTR, activeTraceParent, contextOf, inSpan } from '../tracing';
import { ClaimSweep } from './claimSweep';
import { AcceptanceGate, BacklogGate, type StartGate } from './gates';
import { RecentSales } from './recentSales';

/** Why a start failed, as the metrics label it. */
export type StartFailure = 'resource_exhausted' | 'unavailable' | 'deadline_exceeded' | 'invalid_entry' | 'other';

/** What the process running a starter does with each start, failure and backlog reading (its metrics: metrics.ts). */
export type StartHooks = Pick<StarterDeps, 'onStarted' | 'onFailure'> & { onBacklog(tasks: number): void };

export interface StarterDeps {
  queue: StartQueue;
  /**
   * Settles or undoes the sale's purchase claims older than olderThanMs (src/reservation/claims.ts): those of an
   * API process that died, or stalled, between the claim and its outcome, on a sale of several stock shards.
   */
  repairClaims(saleId: number, olderThanMs: number): Promise<{ settled: number; undone: number }>;
  /** Stores the order and starts its workflow; 'already-started' when its id exists. */
  start(order: OrderInput, traceParent?: string): Promise<'started' | 'already-started'>;
  /** The sales whose queues may hold entries (cached by the caller). */
  saleIds(): Promise<readonly number[]>;
  /** Asked in turn before each read: how long starts wait, how many may go (src/starter/gates.ts). */
  gates: StartGate[];
  log: Logger;
  /** This process's name in the consumer group; unique per process. */
  consumer: string;
  maxInFlight: number;
  claimIdleMs: number;
  onStarted(result: 'started' | 'already-started'): void;
  onFailure(cause: StartFailure): void;
}

const MIN_POLL_MS = 10;
/**
 * Longest wait between two polls of a sale whose queue stays empty. Entries reach a queue through a process
 * that noticed them (and polls that sale every MIN_POLL_MS); the others find them this way only when that
 * process did not read them: it died or stopped first, or its buyer got a 503 for a reservation Redis made
 * but did not answer, so a long wait costs little and spares an idle process the reads of every recent sale.
 * It also bounds how often an idle sale is swept for claims when claimIdleMs/2 is shorter.
 */
const MAX_POLL_MS = 5000;
/** Longest sleep of the loop: it re-reads the list of sales and retries refused starts at least this often. */
const MAX_SLEEP_MS = 1000;
/** Sales polled per turn of the loop (each poll is one or two Redis round trips). */
const POLL_BATCH = 10;
const BACKOFF_START_MS = 100;
const BACKOFF_MAX_MS = 5000;
/** A queue whose oldest entry waits longer than this is logged as behind, at most once per LAG_LOG_MS. */
const LAG_WARN_MS = 10_000;
const LAG_LOG_MS = 10_000;

/**
 * @returns the back-off class of a start's error: Temporal's gRPC status, as the client reports it, or
 *   PostgreSQL unreachable (its store comes first) as UNAVAILABLE
 */
export function classify(err: unknown): StartFailure {
  if (err instanceof InvalidEntry) return 'invalid_entry';
  const text = `${(err as Error)?.name} ${(err as Error)?.message} ${String((err as { code?: unknown })?.code ?? '')}`;
  if (/RESOURCE_EXHAUSTED/.test(text)) return 'resource_exhausted';
  if (/DEADLINE_EXCEEDED/.test(text)) return 'deadline_exceeded';
  // PostgreSQL away (the order is stored before its start): a pause and a retry, as for Temporal away.
  if (/UNAVAILABLE|ECONNREFUSED|ECONNRESET|57P01|57P03|Connection terminated|timeout exceeded when trying to connect/.test(text)) return 'unavailable';
  return 'other';
}

interface SaleState {
  nextPollAt: number;
  lastPollAt: number;
  intervalMs: number;
  nextClaimAt: number;
  claimCursor: string;
}

export class Starter {
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly sales = new Map<number, SaleState>();
  /** Sales noticed here that the list of sales did not name yet (it is re-read now and then). */
  private readonly noticed = new Set<number>();
  /** Entry ids in flight or waiting for a retry here, so a claim does not take them twice. */
  private readonly held = new Set<string>();
  private readonly retry: { saleId: number; entry: QueuedOrder }[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private pausedUntil = 0;
  private backoffMs = 0;
  /** Ends the loop's current wait: a sleep until the next poll (then idleUntil says until when), or a wait for a slot. */
  private wake: (() => void) | undefined;
  private idleUntil = Infinity;
  private lastLagLog = 0;
  private lastReadError = 0;
  private readonly claimSweep: ClaimSweep;

  constructor(private readonly deps: StarterDeps) {
    this.claimSweep = new ClaimSweep({ ...deps, fallbackIds: () => [...this.sales.keys()] });
  }

  /** Starts the loop and the claim sweep (idempotent). */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
    this.claimSweep.start();
  }

  /**
   * Says that this process has just accepted an order (appended to the sale's queue), which counts toward the
   * pace of acceptance: poll the sale soon (at most every MIN_POLL_MS, so a stampede's reservations cost one
   * read per poll, not one each). Wakes the loop only out of an idle sleep that would last longer; a loop
   * waiting for a free slot, paused by the back-off or waiting for the acceptance is left alone.
   */
  notice(saleId: number): void {
    for (const gate of this.deps.gates) gate.accepted?.();
    if (!this.sales.has(saleId)) this.noticed.add(saleId);
    const state = this.stateOf(saleId);
    state.intervalMs = MIN_POLL_MS;
    state.nextPollAt = Math.min(state.nextPollAt, Math.max(Date.now(), state.lastPollAt + MIN_POLL_MS));
    // A sale seen for the first time is due at once (nextPollAt 0) while the loop may sleep for a second.
    if (state.nextPollAt < this.idleUntil) this.wake?.();
  }

  /**
   * Stops reading, waits for the starts in flight (each bounded by the Temporal call deadline) and leaves the
   * groups where this process holds nothing; entries it still holds stay pending for other starters to claim.
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await Promise.all([this.loop, this.claimSweep.stop()]);
    await Promise.allSettled(this.inFlight);
    const holds = new Set(this.retry.map((r) => r.saleId));
    await Promise.allSettled([...this.sales.keys()].filter((id) => !holds.has(id)).map((id) => this.deps.queue.leave(id, this.deps.consumer)));
  }

  /**
   * @returns per watched sale, entries still to start and the oldest one's age (ms); logs the sales whose
   *   oldest entry waits longer than LAG_WARN_MS (at most once per LAG_LOG_MS)
   */
  async depths(nowMs = Date.now()): Promise<Map<number, { waiting: number; oldestAgeMs: number | null }>> {
    const ids = [...this.sales.keys()];
    const depths = await Promise.all(ids.map((id) => this.deps.queue.depth(id, nowMs)));
    const out = new Map(ids.map((id, i) => [id, depths[i]]));
    const behind = [...out].filter(([, d]) => (d.oldestAgeMs ?? 0) > LAG_WARN_MS);
    if (behind.length && nowMs - this.lastLagLog >= LAG_LOG_MS) {
      this.lastLagLog = nowMs;
      for (const [saleId, d] of behind) this.deps.log.warn({ saleId, ...d, inFlight: this.inFlight.size }, 'start queue behind: accepted orders wait for their workflow');
    }
    return out;
  }

  private stateOf(saleId: number): SaleState {
    let state = this.sales.get(saleId);
    if (!state) {
      // Due at once, but counted idle until a poll finds entries (or this process accepts in it): a sale being
      // sold here goes before every listed sale not yet polled, however many are recent.
      state = { nextPollAt: 0, lastPollAt: 0, intervalMs: MAX_POLL_MS, nextClaimAt: 0, claimCursor: '0-0' };
      this.sales.set(saleId, state);
    }
    return state;
  }

  /** Waits ms (Infinity: until woken); `idle` lets notice() wake it early, else only a freed slot or stop() does. */
  private sleep(ms: number, idle: boolean): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = Number.isFinite(ms) ? setTimeout(done, ms) : undefined;
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
      this.idleUntil = idle ? Date.now() + ms : -Infinity;
    }).finally(() => {
      this.wake = undefined;
      this.idleUntil = Infinity;
    });
  }

  private async run(): Promise<void> {
    let lastLag = 0;
    while (this.running) {
      const now = Date.now();
      if (now < this.pausedUntil) {
        await this.sleep(this.pausedUntil - now, false);
        continue;
      }
      if (this.inFlight.size >= this.deps.maxInFlight) {
        await this.sleep(Infinity, false);
        continue;
      }
      const waitMs = await this.gatesWait();
      if (waitMs > 0) {
        await this.sleep(waitMs, false);
        continue;
      }
      while (this.retry.length && this.free() > 0) {
        const { saleId, entry } = this.retry.shift() as { saleId: number; entry: QueuedOrder };
        this.launch(saleId, entry);
      }
      try {
        await this.watch(await this.deps.saleIds());
        await this.pollDue(now);
        if (now - lastLag >= LAG_LOG_MS) {
          lastLag = now;
          await this.depths(now);
        }
      } catch (err) {
        if (now - this.lastReadError >= LAG_LOG_MS) {
          this.lastReadError = now;
          this.deps.log.warn({ err }, 'start queue unreadable; retrying');
        }
        this.pause();
      }
      const next = Math.min(...[...this.sales.values()].map((s) => s.nextPollAt), Date.now() + MAX_SLEEP_MS);
      if (this.running && this.inFlight.size < this.deps.maxInFlight && next > Date.now()) await this.sleep(next - Date.now(), true);
    }
  }

  /**
   * Polls the given sales from now on, and stops polling those that left the list (unless entries of theirs wait
   * here, or this process noticed them and the list does not name them yet).
   */
  private async watch(saleIds: readonly number[]): Promise<void> {
    for (const saleId of saleIds) this.noticed.delete(saleId);
    const keep = new Set([...saleIds, ...this.noticed, ...this.retry.map((r) => r.saleId)]);
    for (const saleId of this.sales.keys()) if (!keep.has(saleId)) this.sales.delete(saleId);
    for (const saleId of saleIds) this.stateOf(saleId);
  }

  /**
   * Reads (and every claimIdleMs/2, claims) entries of up to POLL_BATCH sales whose poll is due, for the free
   * slots: the busiest first (shortest interval), then the longest overdue, so that a sale being sold waits
   * for at most POLL_BATCH others however many recent sales there are.
   */
  private async pollDue(now: number): Promise<void> {
    const due = [...this.sales]
      .filter(([, s]) => s.nextPollAt <= now)
      .sort(([, a], [, b]) => a.intervalMs - b.intervalMs || a.nextPollAt - b.nextPollAt)
      .slice(0, POLL_BATCH);
    for (const [saleId, state] of due) {
      const free = this.free();
      if (free <= 0 || !this.running || Date.now() < this.pausedUntil) return;
      const raw: RawEntry[] = [];
      if (now >= state.nextClaimAt) {
        const claimed = await this.deps.queue.claim(saleId, this.deps.consumer, this.deps.claimIdleMs, free, state.claimCursor);
        state.claimCursor = claimed.cursor;
        // A sweep that went round waits; one that stopped part-way goes on at the next poll.
        if (claimed.cursor === '0-0') state.nextClaimAt = now + this.deps.claimIdleMs / 2;
        raw.push(...claimed.entries.filter(([id]) => !this.held.has(id)));
      }
      if (raw.length < free) raw.push(...(await this.deps.queue.read(saleId, this.deps.consumer, free - raw.length)));
      for (const entry of raw) {
        let order;
        try {
          order = parseEntry(saleId, entry);
        } catch (err) {
          this.deps.onFailure(classify(err));
          this.deps.log.error({ err, saleId }, 'start queue entry cannot be started; set aside in its shard\'s accepted:invalid stream');
          await this.deps.queue.setAside(saleId, entry);
          continue;
        }
        this.launch(saleId, order);
      }
      state.intervalMs = raw.length ? MIN_POLL_MS : Math.min(MAX_POLL_MS, state.intervalMs * 2);
      state.lastPollAt = now;
      state.nextPollAt = now + state.intervalMs;
    }
  }

  /** @returns how long the first gate that holds the starts wants them to wait (ms; 0: they go) */
  private async gatesWait(): Promise<number> {
    const idle = this.inFlight.size === 0 && this.retry.length === 0;
    for (const gate of this.deps.gates) {
      const ms = await gate.waitMs(idle);
      if (ms > 0) return ms;
    }
    return 0;
  }

  /** @returns starts that may go now: free slots, within every gate's room */
  private free(): number {
    return Math.min(this.deps.maxInFlight - this.inFlight.size, ...this.deps.gates.map((g) => g.room?.() ?? Infinity));
  }

  /** Pauses reading; the starts that fail during a pause do not lengthen it (one step per round). */
  private pause(): void {
    if (Date.now() < this.pausedUntil) return;
    this.backoffMs = this.backoffMs ? Math.min(BACKOFF_MAX_MS, this.backoffMs * 2) : BACKOFF_START_MS;
    this.pausedUntil = Date.now() + this.backoffMs;
  }

  private launch(saleId: number, entry: QueuedOrder): void {
    for (const gate of this.deps.gates) gate.started?.();
    this.held.add(entry.entryId);
    const task = this.deps
      .start(entry.order, entry.traceParent)
      .then(
        async (result) => {
          this.backoffMs = 0;
          this.deps.onStarted(result);
          this.held.delete(entry.entryId);
          // Unacknowledged, the entry is claimed later and its start finds the workflow: harmless.
          await this.deps.queue.done(saleId, [entry.entryId]).catch((err: unknown) => this.deps.log.warn({ err, saleId, orderId: entry.order.orderId }, 'start queue ack failed'));
        },
        (err: unknown) => {
          const cause = classify(err);
          this.deps.onFailure(cause);
          if (cause === 'other') {
            this.held.delete(entry.entryId);
            this.deps.log.error({ err, saleId, orderId: entry.order.orderId }, 'workflow start failed; the entry is claimed again later');
            return;
          }
          if (Date.now() >= this.pausedUntil) {
            this.deps.log.warn({ err: (err as Error)?.message, cause, saleId, orderId: entry.order.orderId }, 'workflow start refused; backing off');
          }
          this.pause();
          this.retry.push({ saleId, entry });
        },
      )
      .finally(() => {
        this.inFlight.delete(task);
        // A loop waiting for a free slot goes on (one paused goes back to its pause); one sleeping until its next poll is left alone.
        if (this.idleUntil === -Infinity) this.wake?.();
      });
    this.inFlight.add(task);
  }
}

/**
 * Stores the order before its workflow exists (Orders.place: PENDING with its unit, or REJECTED), so that from
 * here on PostgreSQL knows every order that holds a unit and a rebuild cannot miss it (src/reservation/loading.ts).
 * An order PostgreSQL cannot store at all (a constraint it cannot meet) is left to its workflow, whose own place
 * meets the same refusal and ends it REJECTED.
 * @throws pg errors other than constraint violations (PostgreSQL unreachable): the start is tried again later
 */
async function store(orders: Orders, order: OrderInput): Promise<void> {
  try {
    await orders.place(order, activeTraceParent());
  } catch (err) {
    if (!isConstraintViolation(err)) throw err;
  }
}

/**
 * The starter of one process (the API's, or `npm run starter`'s), from the configuration: it polls the recent
 * sales' start queues over `redis` (a connection of its own: its reads must not queue behind the purchases'
 * scripts), repairs claims through `store`, as a consumer named after the host and process, and starts on the configured task queue.
 * @param hooks what the process does with each start, failure and backlog reading (metrics)
 */
export function createStarter(
  config: Config,
  clients: { redis: FlashRedis; store: ReservationStore; pool: Pool; workflows: OrderWorkflows; log: Logger },
  hooks: StartHooks,
): Starter {
  const recentSales = new RecentSales(clients.pool, config.CATALOG_REFRESH_MS);
  const orders = new Orders(clients.pool, clients.store);
  const { onBacklog, ...onStart } = hooks;
  return new Starter({
    queue: new StartQueue(clients.redis, clients.store.layouts),
    repairClaims: (saleId, olderThanMs) => repairClaims(clients.redis, clients.store.layouts, saleId, olderThanMs),
    // The start joins the buyer's trace through its entry's traceparent: a span for the wait and the call, whose
    // child (the Temporal client's) carries the context on to the workflow.
    start: (order, traceParent) =>
      context.with(contextOf(traceParent), () =>
        inSpan('start order', { attributes: { [ATTR.orderId]: order.orderId, [ATTR.saleId]: order.saleId, [ATTR.queueWaitMs]: Date.now() - order.reservedAtMs } }, async () => {
          await store(orders, order);
          return clients.workflows.start(order);
        }),
      ),
    saleIds: () => recentSales.ids(),
    gates: [
      new AcceptanceGate(config.STARTER_YIELD_ABOVE_PER_S, clients.log),
      new BacklogGate(() => clients.workflows.taskBacklog(), config.STARTER_MAX_BACKLOG, onBacklog, clients.log),
    ],
    log: clients.log,
    consumer: `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
    maxInFlight: config.STARTER_MAX_IN_FLIGHT,
    claimIdleMs: config.STARTER_CLAIM_IDLE_MS,
    ...onStart,
  });
}
