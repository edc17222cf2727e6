/**
 * The starter's pacing policy towards the stampede: while the sales accept orders faster than Temporal can start
 * them, starting some meanwhile drains the start queues no sooner and takes CPU the purchases need
 * (AcceptanceGate, src/starter/gates.ts, asks AcceptancePace before the starter reads anything). The mechanism
 * itself (read, start, acknowledge, claim) knows nothing of it.
 */

/** The span between two readings of the pace of acceptance (ms). */
export const PACE_WINDOW_MS = 250;

/**
 * The pace at which orders are accepted, from readings of how many were accepted since the one before (the start
 * queues' own counts, so every API process's orders count, whichever process starts them): hot while the last
 * reading or the one before saw at least abovePerS orders per second over its span. Starts wait while it is
 * hot, for at most maxMs in a row; past that they go on until a reading below abovePerS, and the next hot spell
 * waits anew. A starter with nothing in flight also waits one more window when the first reading after a quiet
 * one finds orders below the pace: that reading's span may hold a stampede's first milliseconds averaged over a
 * quiet second, and going then sets off a round of starts, and the workflow tasks they cause, beside the first
 * second of a stampede (docs/performance.md). A busy starter (a drain under way) does not: a trickle of orders
 * would hold every sale's starts a window at a time.
 * Times in ms, from a monotonic clock (performance.now()).
 */
export class AcceptancePace {
  private lastAt: number | undefined;
  private perS = 0;
  private previousPerS = 0;
  private hotSince: number | undefined;

  /** @param abovePerS orders/s; 0 never waits. @param maxMs the longest wait in a row */
  constructor(
    private readonly abovePerS: number,
    private readonly maxMs: number,
  ) {}

  /** Takes a reading at `now`: `added` orders accepted since the previous one (the first sets the start). */
  read(added: number, now: number): void {
    if (this.lastAt !== undefined && now > this.lastAt) {
      this.previousPerS = this.perS;
      this.perS = (added * 1000) / (now - this.lastAt);
    }
    this.lastAt = now;
  }

  /**
   * @param starterIdle whether the starter has no start in flight or waiting for a retry
   * @returns 'wait' while hot (for at most maxMs in a row), 'overdue' while hot beyond that, 'opening' while an
   *   idle starter's first reading after a quiet one found orders below the pace, else 'go'
   */
  at(now: number, starterIdle: boolean): 'go' | 'opening' | 'wait' | 'overdue' {
    if (this.abovePerS === 0) return 'go';
    if (Math.max(this.previousPerS, this.perS) < this.abovePerS) {
      this.hotSince = undefined;
      return starterIdle && this.previousPerS === 0 && this.perS > 0 ? 'opening' : 'go';
    }
    this.hotSince ??= now;
    return now - this.hotSince < this.maxMs ? 'wait' : 'overdue';
  }
}
