/**
 * What each starter process keeps up on timers of their own, beside its starts: purchase claim repair
 * (claimSweep.ts) and the reconciler (reconcileLoop.ts), started and stopped together.
 */
import { ClaimSweep, type ClaimSweepDeps } from './claimSweep';
import { ReconcileLoop, type ReconcileLoopDeps } from './reconcileLoop';

export interface Upkeep {
  start(): void;
  /** Stops both timers and waits for their rounds under way. */
  stop(): Promise<void>;
}

/** @returns the claim sweep and the reconciler, each over its sales (fallbackIds when they cannot be read) */
export function upkeep(claims: Omit<ClaimSweepDeps, 'fallbackIds'>, reconcile: Omit<ReconcileLoopDeps, 'fallbackIds' | 'log'>, fallbackIds: () => number[]): Upkeep {
  const sweep = new ClaimSweep({ ...claims, fallbackIds });
  const reconciler = new ReconcileLoop({ ...reconcile, log: claims.log, fallbackIds });
  return {
    start() {
      sweep.start();
      reconciler.start();
    },
    async stop() {
      await Promise.all([sweep.stop(), reconciler.stop()]);
    },
  };
}
