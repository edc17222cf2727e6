/** Every order's history read back: workflow task timeouts and failures, and how late units came back. */
import { temporal as proto } from '@temporalio/proto';
import type { Order, OrderInput } from '../../src/order/types';
import { paymentDeadlineMs } from '../../src/order/types';
import type { connectTemporal } from '../../src/workflows/client';
import { lagSummary } from './figures';

const { WorkflowTaskFailedCause } = proto.api.enums.v1;

/** Histories read at once: many reads in flight keep the dev server busy rather than waiting on each round trip. */
const HISTORY_READS_IN_FLIGHT = 64;

type HistoryEvent = NonNullable<Awaited<ReturnType<ReturnType<Awaited<ReturnType<typeof connectTemporal>>['workflow']['getHandle']>['fetchHistory']>>['events']>[number];

const eventMs = (e: HistoryEvent) => Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6);
const payloadJson = (payload: { data?: Uint8Array | null } | undefined) => JSON.parse(Buffer.from(payload?.data ?? []).toString('utf8')) as unknown;

/**
 * Reads every order's history (HISTORY_READS_IN_FLIGHT at a time): its workflow task timeouts, its failures by
 * cause, and for an EXPIRED order how long after its deadline its unit came back (returnLagMs).
 */
export async function scanHistories(temporal: Awaited<ReturnType<typeof connectTemporal>>, orderIds: readonly string[], paidVia: ReadonlyMap<string, 'route' | 'signal'>) {
  let timedOut = 0;
  let events = 0;
  let workflowTasks = 0;
  let stateTransitions = 0;
  const failedByCause: Record<string, number> = {};
  const unhandledCommandBy: Record<string, number> = {};
  const lags = { startedBeforeDeadline: [] as number[], firstRanAfterDeadline: [] as number[] };
  let next = 0;
  await Promise.all(
    Array.from({ length: HISTORY_READS_IN_FLIGHT }, async () => {
      while (next < orderIds.length) {
        const orderId = orderIds[next++];
        const handle = temporal.workflow.getHandle(orderId);
        const [fetched, described] = await Promise.all([handle.fetchHistory(), handle.describe()]);
        const history = fetched.events ?? [];
        stateTransitions += Number(described.raw.workflowExecutionInfo?.stateTransitionCount?.toString() ?? 0);
        const input = payloadJson(history[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]) as OrderInput;
        const deadlineMs = paymentDeadlineMs(input);
        const firstTask = history.find((e) => e.workflowTaskStartedEventAttributes);
        const ranAfterDeadline = firstTask !== undefined && eventMs(firstTask) >= deadlineMs;
        events += history.length;
        for (const e of history) {
          if (e.workflowTaskScheduledEventAttributes) workflowTasks += 1;
          if (e.workflowTaskTimedOutEventAttributes) timedOut += 1;
          const failed = e.workflowTaskFailedEventAttributes;
          if (failed) {
            const cause = (WorkflowTaskFailedCause[failed.cause ?? 0] ?? String(failed.cause)).replace('WORKFLOW_TASK_FAILED_CAUSE_', '');
            failedByCause[cause] = (failedByCause[cause] ?? 0) + 1;
            if (cause === 'UNHANDLED_COMMAND') {
              const key = `${paidVia.get(orderId) ?? 'unpaid'}, first ran ${ranAfterDeadline ? 'after' : 'before'} the deadline`;
              unhandledCommandBy[key] = (unhandledCommandBy[key] ?? 0) + 1;
            }
          }
        }
        const completed = history.find((e) => e.workflowExecutionCompletedEventAttributes);
        const result = completed && (payloadJson(completed.workflowExecutionCompletedEventAttributes?.result?.payloads?.[0]) as Order);
        if (result?.status !== 'EXPIRED' || !firstTask) continue;
        // The unit goes back in the task that settles the order, the last before the workflow completes.
        const settledIn = [...history].reverse().find((e) => e.workflowTaskCompletedEventAttributes) ?? (completed as HistoryEvent);
        (eventMs(firstTask) < deadlineMs ? lags.startedBeforeDeadline : lags.firstRanAfterDeadline).push(eventMs(settledIn) - deadlineMs);
      }
    }),
  );
  return {
    historiesScanned: orderIds.length,
    timedOutInHistory: timedOut,
    failedInHistory: failedByCause,
    unhandledCommandBy,
    perOrder: {
      events: Math.round((events / Math.max(1, orderIds.length)) * 10) / 10,
      workflowTasks: Math.round((workflowTasks / Math.max(1, orderIds.length)) * 100) / 100,
      stateTransitions: Math.round((stateTransitions / Math.max(1, orderIds.length)) * 10) / 10,
    },
    returnLagMs: { startedBeforeDeadline: lagSummary(lags.startedBeforeDeadline), firstRanAfterDeadline: lagSummary(lags.firstRanAfterDeadline) },
  };
}
