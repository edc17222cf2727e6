/**
 * In-memory sold-out flags, so that after an item sells out each API process answers SOLD_OUT without a
 * Redis round trip. A timer re-reads the stock of flagged items every recheckMs and clears a flag as soon as
 * units came back (expired or rejected orders), so staleness is bounded by recheckMs; one MGET per sale per
 * tick, whatever the request rate.
 */
import type { ReservationStore } from '../reservation/store';

export class SoldOutFlags {
  /** itemId → saleId of items believed sold out. */
  private readonly flagged = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: ReservationStore,
    private readonly recheckMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  has(itemId: number): boolean {
    return this.flagged.has(itemId);
  }

  flag(saleId: number, itemId: number): void {
    this.flagged.set(itemId, saleId);
  }

  /** Clears an item's flag at once: this process gave one of its units back (a cancel), which the recheck would find later. */
  unflag(itemId: number): void {
    this.flagged.delete(itemId);
  }

  get size(): number {
    return this.flagged.size;
  }

  /** Starts the periodic recheck; the timer does not keep the process alive. */
  start(): void {
    this.timer ??= setInterval(() => void this.recheck().catch(this.onError), this.recheckMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Clears the flag of every item whose Redis stock is above zero (or no longer loaded). */
  async recheck(): Promise<void> {
    const bySale = new Map<number, number[]>();
    for (const [itemId, saleId] of this.flagged) bySale.set(saleId, [...(bySale.get(saleId) ?? []), itemId]);
    for (const [saleId, itemIds] of bySale) {
      const stock = await this.store.view.stock(saleId, itemIds);
      for (const [itemId, left] of stock) if (left === undefined || left > 0) this.flagged.delete(itemId);
    }
  }
}
