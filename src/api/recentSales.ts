/**
 * The sales whose orders may still live in Redis alone (accepted, their workflow not yet started or their row
 * not yet written): the recent ones in PostgreSQL (src/sales.ts recentSaleIds), re-read at most every
 * refreshMs, plus those this process has just reserved in. The starter polls their start queues; GET order
 * looks for a reservation there before the order's row exists.
 */
import type { Pool } from 'pg';
import { recentSaleIds } from '../sales';

export class RecentSales {
  private list: readonly number[] = [];
  private readAtMs = -Infinity;
  private reading: Promise<readonly number[]> | undefined;
  /** Sales added here, with when; kept until a read that began after them lists them. */
  private readonly added = new Map<number, number>();

  constructor(
    private readonly pool: Pool,
    private readonly refreshMs: number,
  ) {}

  /**
   * @param maxAgeMs re-read PostgreSQL when the list is older than this (default: refreshMs)
   * @returns the sale ids. @throws pg errors when PostgreSQL is unreachable and nothing was read before
   */
  async ids(maxAgeMs = this.refreshMs): Promise<readonly number[]> {
    if (Date.now() - this.readAtMs >= maxAgeMs) {
      this.reading ??= this.read().finally(() => {
        this.reading = undefined;
      });
      await this.reading.catch((err: unknown) => {
        if (this.readAtMs === -Infinity) throw err;
      });
    }
    return this.added.size ? [...new Set([...this.list, ...this.added.keys()])] : this.list;
  }

  /** Adds a sale this process has just reserved in, so that it is watched before the next read lists it. */
  add(saleId: number): void {
    if (!this.added.has(saleId) && !this.list.includes(saleId)) this.added.set(saleId, Date.now());
  }

  private async read(): Promise<readonly number[]> {
    const startedAt = Date.now();
    this.list = await recentSaleIds(this.pool);
    this.readAtMs = startedAt;
    for (const [saleId, at] of this.added) if (at < startedAt) this.added.delete(saleId);
    return this.list;
  }
}
