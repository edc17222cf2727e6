/**
 * A reading of the stores taken on a timer, not per request: /readyz and the store-reading gauges of /metrics
 * answer from the last one, so that a flood of them costs the stores nothing (src/api/main.ts makes them).
 */

/** How often the API reads its stores' state for /readyz and /metrics, ms. */
export const STORE_READING_MS = 1000;

export class Polled<T> {
  /** The last reading that settled, or the first while it is taken; undefined until asked. */
  private last: Promise<T> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /**
   * @param read takes one reading; its rejection is what latest() then answers
   * @param everyMs pause between the end of a reading and the start of the next, so that a slow one (a store
   *   timing out) never overlaps the next
   */
  constructor(
    private readonly read: () => Promise<T>,
    private readonly everyMs: number,
  ) {}

  /**
   * The first call takes the first reading, waits for it and starts the timer (a process nobody asks reads
   * nothing); later calls answer at once from the last settled reading, at most everyMs plus one reading old.
   * @returns that reading, or rejects with what it threw
   */
  latest(): Promise<T> {
    this.last ??= this.take();
    return this.last;
  }

  /** Stops the timer; a reading in flight settles and none follows. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private take(): Promise<T> {
    const reading = Promise.resolve().then(this.read);
    // The timer goes on whether it failed or not; readers get the failure from latest().
    void reading
      .catch(() => undefined)
      .then(() => {
        this.last = reading;
        if (!this.stopped) this.timer = setTimeout(() => void this.take(), this.everyMs).unref();
      });
    return reading;
  }
}
