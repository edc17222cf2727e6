/**
 * The sales whose start queues the starter polls: the recent ones in PostgreSQL (src/sale/recent.ts recentSaleIds),
 * re-read at most every refreshMs (a sale this process has just reserved in is added by the starter itself); or,
 * with another query, the sales the reconciler looks at (reconciledSaleIds).
 */
import type { Pool } from 'pg';
import { recentSaleIds } from '../sale/recent';

export class RecentSales {
  private list: readonly number[] = [];
  private readAtMs = -Infinity;
  private reading: Promise<readonly number[]> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly refreshMs: number,
    private readonly query: (pool: Pool) => Promise<number[]> = recentSaleIds,
  ) {}

  /** @returns the sale ids. @throws pg errors when PostgreSQL is unreachable and nothing was read before */
  async ids(): Promise<readonly number[]> {
    if (Date.now() - this.readAtMs >= this.refreshMs) {
      this.reading ??= this.read().finally(() => {
        this.reading = undefined;
      });
      await this.reading.catch((err: unknown) => {
        if (this.readAtMs === -Infinity) throw err;
      });
    }
    return this.list;
  }

  private async read(): Promise<readonly number[]> {
    this.list = await this.query(this.pool);
    this.readAtMs = Date.now();
    return this.list;
  }
}
