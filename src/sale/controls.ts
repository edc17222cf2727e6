/**
 * An operator's controls of a live sale (docs/design.md, "Sale controls"): pause and resume purchases, end the
 * sale now. PostgreSQL holds the sale's state (sale_events.state, the truth a load or a rebuild puts back); every
 * stock shard holds it as its closed mark, which reserve.lua reads before it takes a unit. A control answers only
 * once every shard holds its mark, so no purchase is reserved after that answer. Orders already accepted keep
 * their payment windows: a control touches no order.
 */
import type { Pool } from 'pg';
import type { SaleClosed } from '../reservation/client';
import { markSale, type SaleMark } from '../reservation/closing';
import type { ReservationStore } from '../reservation/store';

export type SaleState = 'OPEN' | SaleClosed;
export type SaleControl = 'pause' | 'resume' | 'end';

const TARGET: Record<SaleControl, SaleState> = { pause: 'PAUSED', resume: 'OPEN', end: 'ENDED' };

/** Thrown by controlSale when a sale that ENDED is asked to pause or resume: an end is for good. */
export class SaleEnded extends Error {}

/** @returns the mark a shard holds for a sale in this state (undefined: open) */
export const closedMarkOf = (state: SaleState): SaleClosed | undefined => (state === 'OPEN' ? undefined : state);

/**
 * Applies a control: the state in PostgreSQL first, which a change numbers (the sale's next `state_version`, in
 * the same statement), then the mark with that number on every stock shard (markSale), where a newer control's
 * mark stays: two controls that cross leave the later one's everywhere, whatever order their marks land in.
 * Idempotent: the same control again writes the same mark and answers the same (`changed` false), so an operator
 * whose answer was lost, or who saw a 503 with some shards marked, sends it again.
 * @returns the sale's state now and whether this call changed it in PostgreSQL; undefined when there is no such sale
 * @throws SaleEnded for pause or resume of an ENDED sale (nothing written); MarkNotReplicated (markSale); pg or
 *   ioredis errors when a store is unreachable (PostgreSQL may hold the new state already: send it again)
 */
export async function controlSale(pool: Pool, store: Pick<ReservationStore, 'redis' | 'layouts' | 'options'>, saleId: number, control: SaleControl): Promise<{ state: SaleState; changed: boolean } | undefined> {
  const res = await pool.query<{ before: SaleState; state: SaleState; version: number }>(
    `UPDATE sale_events s SET state = CASE WHEN b.before = 'ENDED' THEN b.before ELSE $2 END,
       state_version = s.state_version + CASE WHEN b.before IN ('ENDED', $2) THEN 0 ELSE 1 END
     FROM (SELECT state AS before FROM sale_events WHERE id = $1 FOR UPDATE) b
     WHERE s.id = $1 RETURNING b.before, s.state, s.state_version AS version`,
    [saleId, TARGET[control]],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  if (row.state !== TARGET[control]) throw new SaleEnded(`sale ${saleId} ended: it neither pauses nor resumes`);
  await markSale(store, saleId, { closed: closedMarkOf(row.state), version: row.version });
  return { state: row.state, changed: row.before !== row.state };
}

/**
 * @returns the mark of the sale's state as PostgreSQL holds it, with its control's number, for a load, a rebuild
 *   and the reconciler (an open version-1 mark when there is no such sale)
 */
export async function closedMark(pool: Pool, saleId: number): Promise<SaleMark> {
  const res = await pool.query<{ state: SaleState; version: number }>('SELECT state, state_version AS version FROM sale_events WHERE id = $1', [saleId]);
  const row = res.rows[0];
  return row ? { closed: closedMarkOf(row.state), version: row.version } : { closed: undefined, version: 1 };
}
