/**
 * The starter's pacing policy towards the stampede: while this process accepts orders faster than Temporal can
 * start them, starting some meanwhile drains the start queue no sooner and takes CPU the purchases need
 * (AcceptanceGate, src/starter/gates.ts, asks AcceptancePace before the starter reads anything). The mechanism itself (read, start,
 * acknowledge, claim) knows nothing of it.
 */

/** The span over which AcceptancePace measures the pace of acceptance. */
export const PACE_WINDOW_MS = 250;

/**
 * The pace at which this process accepts orders, as the starter's reason to wait: hot while the current or the
 * previous PACE_WINDOW_MS window saw at least abovePerS orders per second; the first order after a quiet spell
 * (a whole window without one) opens a window. Starts wait while it is hot, but for at most maxMs in a row;
 * past that they go on until a whole window has stayed below abovePerS (starts go during such a window too,
 * and the next hot spell waits anew). A starter with nothing in flight also waits out an opening window, whose
 * pace is not known before it has passed: going at its first order lets a full set of starts, and the workflow
 * tasks they cause, run beside the first second of a stampede (docs/performance.md). A busy starter (a drain
 * under way) does not: a trickle of orders would hold every sale's starts a window at a time.
 * Times in ms, from a monotonic clock (performance.now()).
 */
export class AcceptancePace {
  private windowStart = -Infinity;
  private count = 0;
  private previousPerS = 0;
  private hotSince: number | undefined;

  /** @param abovePerS orders/s; 0 never waits */
  constructor(
    private readonly abovePerS: number,
    private readonly maxMs: number,
  ) {}

  /** Counts one order accepted at `now`. */
  accepted(now: number): void {
    this.roll(now);
    if (this.count === 0 && this.previousPerS === 0) this.windowStart = now;
    this.count += 1;
  }

  /**
   * @param starterIdle whether the starter has no start in flight or waiting for a retry
   * @returns 'wait' while hot (for at most maxMs in a row), 'overdue' while hot beyond that, 'opening' while an
   *   idle starter's opening window has not passed (windowLeftMs says for how long), else 'go'
   */
  at(now: number, starterIdle: boolean): 'go' | 'opening' | 'wait' | 'overdue' {
    this.roll(now);
    if (this.abovePerS === 0) return 'go';
    if (Math.max(this.previousPerS, (this.count * 1000) / PACE_WINDOW_MS) < this.abovePerS) {
      if (starterIdle && this.previousPerS === 0 && this.count > 0) return 'opening';
      this.hotSince = undefined;
      return 'go';
    }
    this.hotSince ??= now;
    return now - this.hotSince < this.maxMs ? 'wait' : 'overdue';
  }

  /** @returns ms until the current window has passed (at least 1) */
  windowLeftMs(now: number): number {
    return Math.max(1, this.windowStart + PACE_WINDOW_MS - now);
  }

  private roll(now: number): void {
    if (now - this.windowStart < PACE_WINDOW_MS) return;
    // A window that ended a whole window ago was followed by one without a single order.
    this.previousPerS = now - this.windowStart < 2 * PACE_WINDOW_MS ? (this.count * 1000) / PACE_WINDOW_MS : 0;
    this.windowStart = now;
    this.count = 0;
  }
}
