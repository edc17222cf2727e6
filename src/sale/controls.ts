/**
 * An operator's controls of a live sale (docs/design.md, "Sale controls"): pause and resume purchases, end the
 * sale now. PostgreSQL holds the sale's state (sale_events.state, the truth a load or a rebuild puts back); every
 * stock shard holds it as its closed mark, which reserve.lua reads before it takes a unit. A control answers only
 * once every shard holds its mark, so no purchase is reserved after that answer. Orders already accepted keep
 * their payment windows: a control touches no order.
 */
import type { Pool } from 'pg';
import type { SaleClosed } from '../reservation/client';
import { markSale } from '../reservation/closing';
import type { ReservationStore } from '../reservation/store';

export type SaleState = 'OPEN' | SaleClosed;
export type SaleControl = 'pause' | 'resume' | 'end';

const TARGET: Record<SaleControl, SaleState> = { pause: 'PAUSED', resume: 'OPEN', end: 'ENDED' };

/** Thrown by controlSale when a sale that ENDED is asked to pause or resume: an end is for good. */
export class SaleEnded extends Error {}

/** @returns the mark a shard holds for a sale in this state (undefined: open) */
export const closedMarkOf = (state: SaleState): SaleClosed | undefined => (state === 'OPEN' ? undefined : state);

/**
 * Applies a control: the state in PostgreSQL first, then the mark on every stock shard (markSale). Idempotent: the
 * same control again writes the same and answers the same (`changed` false), so an operator whose answer was
 * lost, or who saw a 503 with some shards marked, sends it again.
 * @returns the sale's state now and whether this call changed it in PostgreSQL; undefined when there is no such sale
 * @throws SaleEnded for pause or resume of an ENDED sale (nothing written); MarkNotReplicated (markSale); pg or
 *   ioredis errors when a store is unreachable (PostgreSQL may hold the new state already: send it again)
 */
export async function controlSale(pool: Pool, store: Pick<ReservationStore, 'redis' | 'layouts' | 'options'>, saleId: number, control: SaleControl): Promise<{ state: SaleState; changed: boolean } | undefined> {
  const res = await pool.query<{ before: SaleState; state: SaleState }>(
    `UPDATE sale_events s SET state = CASE WHEN b.before = 'ENDED' THEN b.before ELSE $2 END
     FROM (SELECT state AS before FROM sale_events WHERE id = $1 FOR UPDATE) b
     WHERE s.id = $1 RETURNING b.before, s.state`,
    [saleId, TARGET[control]],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  if (row.state !== TARGET[control]) throw new SaleEnded(`sale ${saleId} ended: it neither pauses nor resumes`);
  await markSale(store, saleId, closedMarkOf(row.state));
  return { state: row.state, changed: row.before !== row.state };
}

/** @returns the closed mark of the sale's state as PostgreSQL holds it (undefined: open, or no such sale), for a load or a rebuild */
export async function closedMark(pool: Pool, saleId: number): Promise<SaleClosed | undefined> {
  const res = await pool.query<{ state: SaleState }>('SELECT state FROM sale_events WHERE id = $1', [saleId]);
  return res.rows[0] && closedMarkOf(res.rows[0].state);
}
