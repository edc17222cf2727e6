/**
 * The reconciler on a timer of its own (docs/design.md, "The reconciler"): every interval, a round over the sales
 * still open or settling (src/reservation/reconciler.ts), whatever the starts' capacity; none while the sales
 * accept a stampede (the AcceptanceGate's word), whose presses need the cores and whose reservations without rows
 * are no drift. Each starter process runs one; leases in the shards keep each shard's passes to one process at a time.
 */
import type { Logger } from '../infra/logger';
import type { Repair } from '../reservation/drift';
import type { SalePass } from '../reservation/reconciler';
import type { StartGate } from './gates';

export interface ReconcileLoopDeps {
  /** One round over the sales; a sale whose pass failed is told to onFailure. @returns the passes that ran */
  reconcile(saleIds: readonly number[], onFailure: (saleId: number, err: unknown) => void): Promise<SalePass[]>;
  /** The sales to reconcile; when it fails, `fallbackIds` are. */
  saleIds(): Promise<readonly number[]>;
  fallbackIds(): number[];
  /** Asked before each round: a round waits while it says wait (the stampede). */
  gate?: StartGate;
  everyMs: number;
  /** Told each pass: whether it was full, how long it took (ms), and the repairs it made. */
  onPass(full: boolean, ms: number, repairs: readonly Repair[]): void;
  log: Logger;
}

export class ReconcileLoop {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;

  constructor(private readonly deps: ReconcileLoopDeps) {}

  /** A round every everyMs from now on, one round at a time (idempotent). */
  start(): void {
    this.timer ??= setInterval(() => {
      this.round ??= this.run().finally(() => (this.round = undefined));
    }, this.deps.everyMs);
  }

  /** Stops the timer and waits for a round under way. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.round;
  }

  /** One round; a failure is logged (at most once a minute per sale, or for the round) and tried again next round. */
  private async run(): Promise<void> {
    if (((await this.deps.gate?.waitMs(true)) ?? 0) > 0) return;
    const saleIds = await this.deps.saleIds().catch(() => this.deps.fallbackIds());
    const failed = (saleId: number, err: unknown) => {
      if (this.firstInAMinute(saleId)) this.deps.log.warn({ err: (err as Error).message, saleId }, 'reconciler pass failed; trying again next round');
    };
    try {
      for (const { saleId, full, ms, repairs } of await this.deps.reconcile(saleIds, failed)) {
        this.deps.onPass(full, ms, repairs);
        // A repair means something lost a write: each is logged with what the reconciler saw.
        for (const { kind, k, seen, ...repair } of repairs) this.deps.log.warn({ saleId, shard: k, repair: kind, seen, ...ids(repair) }, 'reconciler repaired Redis from PostgreSQL');
      }
    } catch (err) {
      failed(0, err);
    }
  }

  private readonly lastFailureLog = new Map<number, number>();
  /** @returns whether this is the first failure of the sale (0: of a round) logged in the last minute */
  private firstInAMinute(saleId: number): boolean {
    const now = Date.now();
    if (now - (this.lastFailureLog.get(saleId) ?? 0) < 60_000) return false;
    this.lastFailureLog.set(saleId, now);
    return true;
  }
}

/** The ids a repair names, for its log line (never a reservation's whole value). */
function ids(repair: Record<string, unknown>): Record<string, unknown> {
  const { orderId, userId, itemId, unit, holder, order, mark } = repair as { orderId?: string; userId?: string; itemId?: number; unit?: number; holder?: string; order?: { orderId: string; unit?: number }; mark?: unknown };
  return { orderId: orderId ?? order?.orderId, userId, itemId, unit: unit ?? order?.unit, holder, mark };
}
