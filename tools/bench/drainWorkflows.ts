/**
 * Workflows of tools/bench/drain.ts: the product's orderWorkflow, and beside it the baseline every order is
 * compared with, a minimal workflow (start → one activity → complete).
 */
import { proxyActivities } from '@temporalio/workflow';

export { orderWorkflow } from '../../src/workflows';

const { noop } = proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '30 seconds' });

/** The baseline: one regular activity that does nothing, then done. */
export async function minimalWorkflow(): Promise<void> {
  await noop();
}
