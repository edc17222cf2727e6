/**
 * The starter's loop: reads the sales' start queues through the consumer group, stores each accepted order in
 * PostgreSQL and starts its workflow (an id that exists counts as started), then deletes the entry (I4), at most
 * maxInFlight at once and as the gates allow. Temporal or PostgreSQL away pauses reading (Backoff); any other
 * failure leaves the entry for a claim after claimIdleMs, longer than a start's deadline.
 */
import type { Logger } from '../infra/logger';
import { parseEntry, type QueuedOrder, type RawEntry, type StartQueue } from '../reservation/startQueue';
import type { OrderInput } from '../order/types';
import { classify, type StartFailure } from './failures';
import type { StartGate } from './gates';
import { Backoff, PollSchedule } from './schedule';
import type { ReconcileLoopDeps } from './reconcileLoop';
import { upkeep, type Upkeep } from './upkeep';

/** What the process running a starter does with each start, failure and backlog reading (its metrics: metrics.ts). */
export type StartHooks = Pick<StarterDeps, 'onStarted' | 'onFailure' | 'onReconciled'> & { onBacklog(tasks: number): void };

export interface StarterDeps {
  queue: StartQueue;
  /** Settles or undoes the sale's purchase claims older than olderThanMs (src/reservation/claims.ts). */
  repairClaims(saleId: number, olderThanMs: number): Promise<{ settled: number; undone: number }>;
  /** The reconciler's pass over a sale (src/reservation/reconciler.ts), every everyMs, waiting behind its gate's word. */
  reconciler: Pick<ReconcileLoopDeps, 'reconcile' | 'everyMs' | 'gate' | 'saleIds'>;
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
  /** Told each reconciler pass: full or incremental, its length (ms) and the repairs it made. */
  onReconciled: ReconcileLoopDeps['onPass'];
}

/** A queue whose oldest entry waits longer than LAG_WARN_MS is logged as behind, at most once per LAG_LOG_MS. */
const [LAG_WARN_MS, LAG_LOG_MS] = [10_000, 10_000];

export class Starter {
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly schedule: PollSchedule;
  /** Entry ids in flight or waiting for a retry here, so a claim does not take them twice. */
  private readonly held = new Set<string>();
  private readonly retry: { saleId: number; entry: QueuedOrder }[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly backoff = new Backoff();
  /** Ends the loop's current wait: a sleep until the next poll (then idleUntil says until when), or a wait for a slot. */
  private wake: (() => void) | undefined;
  private idleUntil = Infinity;
  private lastLagLog = 0;
  private lastReadError = 0;
  private readonly upkeep: Upkeep;
  /** The sales whose queues the loop polls: the recent ones and those this process has accepted in. */
  readonly watched = (): readonly number[] => this.schedule.saleIds();

  constructor(private readonly deps: StarterDeps) {
    this.schedule = new PollSchedule(deps.claimIdleMs);
    this.upkeep = upkeep(deps, { ...deps.reconciler, onPass: deps.onReconciled }, () => this.schedule.saleIds());
  }

  /** Starts the loop, the claim sweep and the reconciler (idempotent). */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
    this.upkeep.start();
  }

  /**
   * This process has just accepted an order in the sale: the sale is polled soon (PollSchedule.notice). Wakes the
   * loop only out of an idle sleep that would last longer.
   */
  notice(saleId: number): void {
    // A sale seen for the first time is due at once while the loop may sleep for a second.
    if (this.schedule.notice(saleId, Date.now()) < this.idleUntil) this.wake?.();
  }

  /**
   * Stops reading, waits for the starts in flight (each bounded by the Temporal call deadline) and leaves the
   * groups where this process holds nothing; entries it still holds stay pending for other starters to claim.
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await Promise.all([this.loop, this.upkeep.stop()]);
    await Promise.allSettled(this.inFlight);
    const holds = new Set(this.retry.map((r) => r.saleId));
    await Promise.allSettled(this.schedule.saleIds().filter((id) => !holds.has(id)).map((id) => this.deps.queue.leave(id, this.deps.consumer)));
  }

  /** @returns per watched sale, entries to start and the oldest one's age (ms); logs those behind (LAG_WARN_MS) */
  async depths(nowMs = Date.now()): Promise<Map<number, { waiting: number; oldestAgeMs: number | null }>> {
    const ids = this.schedule.saleIds();
    const depths = await Promise.all(ids.map((id) => this.deps.queue.depth(id, nowMs)));
    const out = new Map(ids.map((id, i) => [id, depths[i]]));
    const behind = [...out].filter(([, d]) => (d.oldestAgeMs ?? 0) > LAG_WARN_MS);
    if (behind.length && nowMs - this.lastLagLog >= LAG_LOG_MS) {
      this.lastLagLog = nowMs;
      for (const [saleId, d] of behind) this.deps.log.warn({ saleId, ...d, inFlight: this.inFlight.size }, 'start queue behind: accepted orders wait for their workflow');
    }
    return out;
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
      if (now < this.backoff.pausedUntil) {
        await this.sleep(this.backoff.pausedUntil - now, false);
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
        this.schedule.watch(await this.deps.saleIds(), this.retry.map((r) => r.saleId));
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
        this.backoff.pause(Date.now());
      }
      const next = this.schedule.nextWake(Date.now());
      if (this.running && this.inFlight.size < this.deps.maxInFlight && next > Date.now()) await this.sleep(next - Date.now(), true);
    }
  }

  /** Reads (and when due, claims) entries of the sales whose poll is due (PollSchedule.due), for the free slots. */
  private async pollDue(now: number): Promise<void> {
    for (const { saleId, claimFrom } of this.schedule.due(now)) {
      const free = this.free();
      if (free <= 0 || !this.running || Date.now() < this.backoff.pausedUntil) return;
      const raw: RawEntry[] = [];
      if (claimFrom !== undefined) {
        const claimed = await this.deps.queue.claim(saleId, this.deps.consumer, this.deps.claimIdleMs, free, claimFrom);
        this.schedule.claimed(saleId, claimed.cursor, now);
        raw.push(...claimed.entries.filter(([id]) => !this.held.has(id)));
      }
      if (raw.length < free) raw.push(...(await this.deps.queue.read(saleId, this.deps.consumer, free - raw.length)));
      for (const entry of raw) await this.startEntry(saleId, entry);
      this.schedule.polled(saleId, raw.length, now);
    }
  }

  /** Launches an entry's start, or sets an entry that cannot be started aside in its shard's invalid stream. */
  private async startEntry(saleId: number, entry: RawEntry): Promise<void> {
    let order;
    try {
      order = parseEntry(saleId, entry);
    } catch (err) {
      this.deps.onFailure(classify(err));
      this.deps.log.error({ err, saleId }, "start queue entry cannot be started; set aside in its shard's accepted:invalid stream");
      await this.deps.queue.setAside(saleId, entry);
      return;
    }
    this.launch(saleId, order);
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

  private launch(saleId: number, entry: QueuedOrder): void {
    for (const gate of this.deps.gates) gate.started?.();
    this.held.add(entry.entryId);
    const task = this.deps
      .start(entry.order, entry.traceParent)
      .then(
        async (result) => {
          this.backoff.reset();
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
          if (Date.now() >= this.backoff.pausedUntil) {
            this.deps.log.warn({ err: (err as Error)?.message, cause, saleId, orderId: entry.order.orderId }, 'workflow start refused; backing off');
          }
          this.backoff.pause(Date.now());
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
