/** Which sales still need their processes' care, by the sale's times in PostgreSQL: the starter's, the reconciler's. */
import type { Pool } from 'pg';

/**
 * Sales whose orders may still need care (a workflow to start, a reservation to find): those not ended more
 * than a day ago, in id order.
 */
export async function recentSaleIds(pool: Pool): Promise<number[]> {
  const res = await pool.query<{ id: number }>(`SELECT id FROM sale_events WHERE ends_at > now() - interval '1 day' ORDER BY id`);
  return res.rows.map((r) => r.id);
}

/**
 * Sales the reconciler keeps in line with PostgreSQL (src/reservation/reconciler.ts): those whose orders may still
 * be pressed for, paid, cancelled or expire, that is until their end plus a payment window, and ten minutes more
 * for the last releases; in id order.
 */
export async function reconciledSaleIds(pool: Pool): Promise<number[]> {
  const res = await pool.query<{ id: number }>(
    `SELECT id FROM sale_events WHERE ends_at + payment_window_ms * interval '1 millisecond' + interval '10 minutes' > now() ORDER BY id`,
  );
  return res.rows.map((r) => r.id);
}

/**
 * Recent sales closed for purchases by their times (ended, or opening more than a minute from now): no stampede
 * is filling their start queues (the starter's AcceptanceGate reads the counts of the others), in id order.
 */
export async function closedSaleIds(pool: Pool): Promise<number[]> {
  const res = await pool.query<{ id: number }>(
    `SELECT id FROM sale_events WHERE ends_at > now() - interval '1 day' AND (ends_at <= now() OR starts_at >= now() + interval '1 minute') ORDER BY id`,
  );
  return res.rows.map((r) => r.id);
}
