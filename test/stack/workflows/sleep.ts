/**
 * The stack tests' workflow: sleeps on a durable timer and returns how much workflow time passed, so a test can
 * tell a timer that really elapsed (dev server) from one the test server skipped.
 */
import { sleep } from '@temporalio/workflow';

export async function sleepWorkflow(ms: number): Promise<number> {
  // Date.now() inside a workflow is the deterministic workflow clock, which time skipping advances.
  const started = Date.now();
  await sleep(ms);
  return Date.now() - started;
}
