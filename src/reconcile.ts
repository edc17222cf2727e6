/**
 * Reconciliation of reservations without a workflow (I4). The API reserves in Redis, then starts the order's
 * workflow; if the process dies in between (or the start and the release after it both failed), a unit is
 * held by an order nobody drives. Each pass finds reservations older than a grace period whose order is
 * neither in PostgreSQL nor known to Temporal, and adopts them: it starts their workflow (same id), which
 * then ends PAID (the buyer sees the order through 409 ALREADY_PURCHASED, which names it) or EXPIRED and
 * returns the unit — one path for every release.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Pool } from 'pg';
import type { ReservationStore } from './reservations';
import { startOrderWorkflow } from './temporal';

export interface ReconcileDeps {
  pool: Pool;
  store: ReservationStore;
  temporal: Client;
  taskQueue: string;
  /** Reservations younger than this (ms) may still be between reserve and start, and are left alone. */
  graceMs: number;
}

export interface ReconcileResult {
  saleId: number;
  reservations: number;
  adopted: string[];
}

/** One pass over one sale. @throws when Redis, PostgreSQL or Temporal is unreachable (the next pass retries) */
export async function reconcileSale(deps: ReconcileDeps, saleId: number, nowMs = Date.now()): Promise<ReconcileResult> {
  const reservations = await deps.store.reservations(saleId);
  const old = reservations.filter((r) => nowMs - r.reservedAtMs > deps.graceMs);
  const stored = await deps.pool.query<{ id: string }>('SELECT id FROM orders WHERE id = ANY($1::uuid[])', [old.map((r) => r.orderId)]);
  const known = new Set(stored.rows.map((r) => r.id));
  const adopted: string[] = [];
  for (const orphan of old.filter((r) => !known.has(r.orderId))) {
    try {
      await deps.temporal.workflow.getHandle(orphan.orderId).describe();
      continue;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
    const item = await deps.pool.query<{ priceMinor: number; paymentWindowMs: number }>(
      `SELECT i.price_minor::float8 AS "priceMinor", s.payment_window_ms AS "paymentWindowMs"
       FROM items i JOIN sale_events s ON s.id = i.sale_id WHERE i.id = $1`,
      [orphan.itemId],
    );
    if (item.rowCount !== 1) continue;
    try {
      await startOrderWorkflow(deps.temporal, deps.taskQueue, { ...orphan, saleId, ...item.rows[0] });
      adopted.push(orphan.orderId);
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
  }
  return { saleId, reservations: reservations.length, adopted };
}

/** Sales whose reservations may still need care: not ended more than a day ago. */
export async function recentSaleIds(pool: Pool): Promise<number[]> {
  const res = await pool.query<{ id: number }>(`SELECT id FROM sale_events WHERE ends_at > now() - interval '1 day' ORDER BY id`);
  return res.rows.map((r) => r.id);
}

/**
 * Runs a pass over every recent sale every intervalMs until stopped; errors are reported and retried next time.
 * @returns a function that stops the loop
 */
export function startReconciler(
  deps: ReconcileDeps,
  intervalMs: number,
  report: (result: ReconcileResult | Error) => void,
): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void (async () => {
      for (const saleId of await recentSaleIds(deps.pool)) report(await reconcileSale(deps, saleId));
    })()
      .catch((err: Error) => report(err))
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
