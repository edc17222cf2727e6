/**
 * When the starter polls each sale's start queue, and how long it backs off: pure, the clock passed in (ms). A
 * sale is polled soon after this process reserved in it, else less and less often while its queue stays empty;
 * the busiest go first, POLL_BATCH a turn; stale entries are claimed every claimIdleMs/2.
 */

export const MIN_POLL_MS = 10;
/**
 * Longest wait between two polls of a sale whose queue stays empty. Entries reach a queue through a process that
 * noticed them (and polls that sale every MIN_POLL_MS); the others find them this way only when that process did
 * not read them (it died or stopped first, or its buyer got a 503 for a reservation Redis made but did not
 * answer), so a long wait costs little and spares an idle process the reads of every recent sale.
 */
export const MAX_POLL_MS = 5000;
/** Longest sleep of the loop: it re-reads the list of sales and retries refused starts at least this often. */
export const MAX_SLEEP_MS = 1000;
/** Sales polled per turn of the loop (each poll is one or two Redis round trips). */
export const POLL_BATCH = 10;
const BACKOFF_START_MS = 100;
const BACKOFF_MAX_MS = 5000;

interface SaleState {
  nextPollAt: number;
  lastPollAt: number;
  intervalMs: number;
  nextClaimAt: number;
  claimCursor: string;
}

/** The poll schedule of the sales a starter watches. */
export class PollSchedule {
  private readonly sales = new Map<number, SaleState>();
  /** Sales noticed here that the list of sales did not name yet (it is re-read now and then). */
  private readonly noticed = new Set<number>();

  constructor(private readonly claimIdleMs: number) {}

  /** @returns the sales watched */
  saleIds(): number[] {
    return [...this.sales.keys()];
  }

  /**
   * This process has just accepted an order in the sale: poll it within MIN_POLL_MS of its last poll.
   * @returns when the sale's next poll is due (ms since the epoch)
   */
  notice(saleId: number, now: number): number {
    if (!this.sales.has(saleId)) this.noticed.add(saleId);
    const state = this.stateOf(saleId);
    state.intervalMs = MIN_POLL_MS;
    state.nextPollAt = Math.min(state.nextPollAt, Math.max(now, state.lastPollAt + MIN_POLL_MS));
    return state.nextPollAt;
  }

  /**
   * Watches the listed sales from now on, and drops those that left the list, unless `holding` names them
   * (entries of theirs wait here) or this process noticed them and the list does not name them yet.
   */
  watch(listed: readonly number[], holding: Iterable<number>): void {
    for (const saleId of listed) this.noticed.delete(saleId);
    const keep = new Set([...listed, ...this.noticed, ...holding]);
    for (const saleId of this.sales.keys()) if (!keep.has(saleId)) this.sales.delete(saleId);
    for (const saleId of listed) this.stateOf(saleId);
  }

  /**
   * @returns up to POLL_BATCH sales due at `now`, the busiest first (shortest interval), then the longest
   *   overdue, so that a sale being sold waits for at most POLL_BATCH others however many sales are recent;
   *   with, for each, the cursor of its claim sweep when a sweep is due
   */
  due(now: number): { saleId: number; claimFrom?: string }[] {
    return [...this.sales]
      .filter(([, s]) => s.nextPollAt <= now)
      .sort(([, a], [, b]) => a.intervalMs - b.intervalMs || a.nextPollAt - b.nextPollAt)
      .slice(0, POLL_BATCH)
      .map(([saleId, s]) => (now >= s.nextClaimAt ? { saleId, claimFrom: s.claimCursor } : { saleId }));
  }

  /** A claim sweep reached `cursor`: one that went round ('0-0') waits claimIdleMs/2; one part-way goes on next poll. */
  claimed(saleId: number, cursor: string, now: number): void {
    const state = this.stateOf(saleId);
    state.claimCursor = cursor;
    if (cursor === '0-0') state.nextClaimAt = now + this.claimIdleMs / 2;
  }

  /** A poll at `now` found `found` entries: a busy sale is polled again soon, an empty one later and later. */
  polled(saleId: number, found: number, now: number): void {
    const state = this.stateOf(saleId);
    state.intervalMs = found ? MIN_POLL_MS : Math.min(MAX_POLL_MS, state.intervalMs * 2);
    state.lastPollAt = now;
    state.nextPollAt = now + state.intervalMs;
  }

  /** @returns when the loop should wake next: the first poll due, MAX_SLEEP_MS from now at the latest */
  nextWake(now: number): number {
    return Math.min(...[...this.sales.values()].map((s) => s.nextPollAt), now + MAX_SLEEP_MS);
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
}

/** Exponential back-off of reading, 100 ms to 5 s; starts that fail during a pause do not lengthen it. */
export class Backoff {
  private stepMs = 0;
  /** Until when reading waits (ms since the epoch). */
  pausedUntil = 0;

  pause(now: number): void {
    if (now < this.pausedUntil) return;
    this.stepMs = this.stepMs ? Math.min(BACKOFF_MAX_MS, this.stepMs * 2) : BACKOFF_START_MS;
    this.pausedUntil = now + this.stepMs;
  }

  /** A start went through: the next pause starts small again. */
  reset(): void {
    this.stepMs = 0;
  }
}
