/**
 * What an order's run history says that its workflow code cannot see: when Temporal received a `paid` signal.
 * A workflow task may run minutes after its signal while the workers are behind, so the task's clock is not the
 * signal's arrival; the history's event time is (the server's clock). Used by the payment step to count a
 * receipt's age to the signal's arrival (src/order/receipt.ts; docs/design.md, "Payments before the start").
 */
import { defaultPayloadConverter } from '@temporalio/common';
import type { google, temporal } from '@temporalio/proto';
import type { Payment } from '../order/types';
import { paidSignal } from './definitions';

/**
 * @param service a Temporal WorkflowService (the worker's NativeConnection's)
 * @returns when Temporal received the first `paid` signal carrying this payment (paymentId and amount, minor
 *   units), in ms since the epoch; undefined when the run's history holds none (an update, or no such order)
 * @throws gRPC errors (the caller's activity is retried)
 */
export async function paidSignalAt(service: temporal.api.workflowservice.v1.WorkflowService, namespace: string, orderId: string, payment: Pick<Payment, 'paymentId' | 'amount'>): Promise<number | undefined> {
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await service.getWorkflowExecutionHistory({ namespace, execution: { workflowId: orderId }, nextPageToken });
    for (const event of page.history?.events ?? []) {
      // Set on a signal's event only.
      const signal = event.workflowExecutionSignaledEventAttributes;
      if (!signal || signal.signalName !== paidSignal.name) continue;
      const [payload] = signal.input?.payloads ?? [];
      const sent = payload ? (defaultPayloadConverter.fromPayload(payload) as Partial<Payment> | null) : undefined;
      if (sent?.paymentId === payment.paymentId && sent.amount === payment.amount && event.eventTime) return timestampMs(event.eventTime);
    }
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return undefined;
}

function timestampMs(ts: google.protobuf.ITimestamp): number {
  return Number(ts.seconds ?? 0) * 1000 + Math.floor((ts.nanos ?? 0) / 1e6);
}
