/**
 * Purchase claim repair on a timer of its own, whatever the starts' capacity: a claim stranded by an API process
 * that died or stalled between the claim and its outcome (src/reservation/claims.ts) answers its buyer 409 for
 * an order that does not exist, and strands most during a stampede, when the starts wait. Each starter process
 * runs one; the repairs are idempotent, so several at once do no harm.
 */
import type { Logger } from '../infra/logger';

export interface ClaimSweepDeps {
  /** Settles or undoes the sale's purchase claims older than olderThanMs; @returns how many of each */
  repairClaims(saleId: number, olderThanMs: number): Promise<{ settled: number; undone: number }>;
  /** The sales to sweep; when it fails, `fallbackIds` are swept. */
  saleIds(): Promise<readonly number[]>;
  fallbackIds(): number[];
  /** Claims at least this old are repaired (ms); the sweep runs every half of it. */
  claimIdleMs: number;
  log: Logger;
}

export class ClaimSweep {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;

  constructor(private readonly deps: ClaimSweepDeps) {}

  /** Sweeps every claimIdleMs/2 from now on, one sweep at a time (idempotent). */
  start(): void {
    this.timer ??= setInterval(() => {
      this.sweeping ??= this.sweep().finally(() => (this.sweeping = undefined));
    }, this.deps.claimIdleMs / 2);
  }

  /** Stops the timer and waits for a sweep under way. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.sweeping;
  }

  /** Repairs the stale claims of every sale; a failure is logged and tried again at the next sweep. */
  private async sweep(): Promise<void> {
    const saleIds = await this.deps.saleIds().catch(() => this.deps.fallbackIds());
    for (const saleId of saleIds) {
      try {
        const repaired = await this.deps.repairClaims(saleId, this.deps.claimIdleMs);
        if (repaired.settled || repaired.undone) this.deps.log.warn({ saleId, ...repaired }, 'purchase claims left by a crash repaired');
      } catch (err) {
        this.deps.log.warn({ err, saleId }, 'purchase claims not repaired; trying again at the next sweep');
      }
    }
  }
}
