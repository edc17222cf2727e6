/**
 * The starter's policies, each behind one small interface: a gate says how long starts wait from now and how
 * many may go. The loop (src/starter/starter.ts) asks its gates before it reads a start queue; the mechanism
 * (read, start, acknowledge, claim) knows nothing of why they wait.
 * - BacklogGate: no more starts than the workers take (Temporal's task queue backlog).
 * - AcceptanceGate: no starts while the sales accept a stampede (AcceptancePace, src/starter/pacing.ts).
 */
import type { Logger } from '../infra/logger';
import { AcceptancePace, PACE_WINDOW_MS } from './pacing';

export interface StartGate {
  /**
   * @param idle whether the starter has no start in flight and none waiting for a retry
   * @returns how long starts wait from now (ms; 0: they may go)
   * @throws never: a gate that cannot read what it judges by lets the starts go
   */
  waitMs(idle: boolean): Promise<number>;
  /** @returns how many starts may go now (a gate without it does not count them) */
  room?(): number;
  /** Told each start made. */
  started?(): void;
}

/** Backlog readings are this far apart (ms); a reading is one DescribeTaskQueue call. */
const BACKLOG_CHECK_MS = 1000;

/**
 * Until the next reading of the task queue's backlog (Temporal's count of workflow tasks waiting for a worker,
 * read every BACKLOG_CHECK_MS), at most maxBacklog minus that backlog starts are made: beyond what the workers
 * take, starting more only lengthens the queue inside Temporal, where the orders' first tasks compete with the
 * tasks that settle others (workflow tasks then outlast their timeout and are run again). Those orders wait in
 * Redis instead, accepted and payable. A failed reading allows a full budget: the starts then find out.
 */
export class BacklogGate implements StartGate {
  private nextCheck = 0;
  private budget = 0;

  /**
   * @param taskBacklog reads the workflow tasks waiting for a worker on the order task queue
   * @param onBacklog told each reading (a metric)
   * @param now clock in ms
   */
  constructor(
    private readonly taskBacklog: () => Promise<number>,
    private readonly maxBacklog: number,
    private readonly onBacklog: (tasks: number) => void,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  async waitMs(): Promise<number> {
    const now = this.now();
    if (now >= this.nextCheck) {
      this.nextCheck = now + BACKLOG_CHECK_MS;
      const tasks = await this.taskBacklog().catch(() => 0);
      this.onBacklog(tasks);
      if (tasks >= this.maxBacklog && this.budget > 0) this.log.info({ tasks, maxBacklog: this.maxBacklog }, 'starts wait: workflow tasks wait for a worker');
      this.budget = Math.max(0, this.maxBacklog - tasks);
    }
    return this.budget > 0 ? 0 : Math.max(1, this.nextCheck - this.now());
  }

  room(): number {
    return Math.max(0, this.budget);
  }

  started(): void {
    this.budget -= 1;
  }
}

/**
 * Acceptance first: while the sales accept orders at yieldAbovePerS or faster (AcceptancePace), no start is made,
 * for at most yieldMaxMs in a row. The starts, their gRPC calls and the first workflow tasks they cause take CPU
 * that the stampede's purchases need, and a queue filled faster than Temporal starts drains no later for being
 * started meanwhile; the orders are payable from the 202 on, and a payment starts its own order's workflow. The
 * pace is read from the start queues' counts of accepted orders (StartQueue.accepted) every PACE_WINDOW_MS, so a
 * starter of its own process (`npm run starter`) waits for the API processes' stampede as one inside an API
 * does. A failed reading lets the starts go. Logs when a hot spell begins and when it has lasted yieldMaxMs.
 */
export class AcceptanceGate implements StartGate {
  private readonly pace: AcceptancePace;
  private was: 'go' | 'wait' | 'overdue' = 'go';
  private nextRead = -Infinity;
  /**
   * Per sale, its count at the last reading. A sale first seen after the first reading counts from 0: a sale
   * is often seen for the first time in its stampede's first second (the starter's list of sales is re-read
   * every CATALOG_REFRESH_MS), and counting from its first reading let a round of starts go beside it. A sale
   * that had old orders (a starter started mid-drain) holds the starts two readings for nothing.
   */
  private counts: ReadonlyMap<number, number> = new Map();

  /**
   * @param yieldAbovePerS orders/s (0: never waits)
   * @param yieldMaxMs the longest wait in a row (ms)
   * @param accepted per sale the starter watches (those its process accepts in included), how many orders it has
   *   ever accepted (StartQueue.accepted)
   * @param now a monotonic clock in ms
   */
  constructor(
    private readonly yieldAbovePerS: number,
    private readonly yieldMaxMs: number,
    private readonly accepted: () => Promise<ReadonlyMap<number, number>>,
    private readonly log: Logger,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.pace = new AcceptancePace(yieldAbovePerS, yieldMaxMs);
  }

  async waitMs(idle: boolean): Promise<number> {
    if (this.yieldAbovePerS === 0) return 0;
    let now = this.now();
    if (now >= this.nextRead) {
      this.nextRead = now + PACE_WINDOW_MS;
      const counts = await this.accepted().catch(() => undefined);
      if (!counts) return 0;
      now = this.now();
      let added = 0;
      for (const [saleId, count] of counts) added += Math.max(0, count - (this.counts.get(saleId) ?? 0));
      this.counts = counts;
      this.pace.read(added, now);
    }
    const pace = this.pace.at(now, idle);
    if (pace === 'opening') return Math.max(1, this.nextRead - now);
    if (pace !== this.was) {
      const fields = { yieldAbovePerS: this.yieldAbovePerS, yieldMaxMs: this.yieldMaxMs };
      if (pace === 'wait') this.log.info(fields, 'starts wait: orders are accepted at STARTER_YIELD_ABOVE_PER_S or faster');
      if (pace === 'overdue') this.log.info(fields, 'starts go on: the acceptance has kept its pace for STARTER_YIELD_MAX_MS');
      this.was = pace;
    }
    return pace === 'wait' ? Math.max(1, this.nextRead - now) : 0;
  }
}
