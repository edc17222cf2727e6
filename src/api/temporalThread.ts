/**
 * Worker-thread side of OrderWorkflows (see orderWorkflows.ts): connects @temporalio/client, answers the
 * operations the API needs, and maps Temporal's errors to outcomes the request thread can act on. Errors it
 * cannot map (Temporal unreachable, a call past its deadline) go back as { name, message, code, stack }.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { type Client, NamespaceNotFoundError, WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { Config } from '../config';
import type { OrderInput, Payment } from '../order/types';
import { connectTemporal, startOrderWorkflow } from '../temporal';
import { paidSignal } from '../workflows/definitions';
import type { Operations, SerializedError, ThreadReply, ThreadRequest } from './orderWorkflows';

/**
 * Temporal wraps the gRPC failure in `cause` ("Failed to describe workflow" ← "14 UNAVAILABLE: …"); its
 * message is appended so that the request thread's isUnavailable sees the status (→ 503) and logs keep it.
 * A missing namespace is a deployment fault, answered like an unreachable server.
 */
function serialize(err: unknown): SerializedError {
  const e = err as { name?: unknown; message?: unknown; code?: unknown; stack?: unknown; cause?: { message?: unknown; code?: unknown } };
  const cause = typeof e?.cause?.message === 'string' ? `: ${e.cause.message}` : '';
  const stack = typeof e?.stack === 'string' ? e.stack : undefined;
  if (err instanceof NamespaceNotFoundError) return { name: 'ServiceError', message: `UNAVAILABLE: ${err.message}`, stack };
  return { name: String(e?.name ?? 'Error'), message: `${String(e?.message ?? err)}${cause}`, code: e?.code ?? e?.cause?.code, stack };
}

function operations(client: Client, config: Config): Operations {
  return {
    async start(order: OrderInput) {
      try {
        await startOrderWorkflow(client, config.TEMPORAL_TASK_QUEUE, order);
        return 'started';
      } catch (err) {
        if (err instanceof WorkflowExecutionAlreadyStartedError) return 'already-started';
        throw err;
      }
    },
    async signalPaid(orderId: string, payment: Payment) {
      try {
        await client.workflow.getHandle(orderId).signal(paidSignal, payment);
        return 'signalled' as const;
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return 'not-found' as const;
        throw err;
      }
    },
    async taskBacklog() {
      const { stats } = await client.workflowService.describeTaskQueue({
        namespace: client.options.namespace,
        taskQueue: { name: config.TEMPORAL_TASK_QUEUE, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        reportStats: true,
      });
      return Number(stats?.approximateBacklogCount ?? 0);
    },
    async checkNamespace() {
      await client.connection.workflowService.describeNamespace({ namespace: client.options.namespace });
    },
  };
}

async function main(): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('temporalThread runs as a worker thread');
  const config = workerData as Config;
  let client: Client;
  try {
    client = await connectTemporal(config);
  } catch (err) {
    port.postMessage({ id: 0, error: serialize(err) } satisfies ThreadReply);
    return;
  }
  const ops = operations(client, config);
  port.on('message', (request: ThreadRequest) => {
    if (request.op === 'close') {
      void client.connection.close().finally(() => port.postMessage({ id: request.id, value: undefined } satisfies ThreadReply));
      return;
    }
    const run = ops[request.op] as (...args: unknown[]) => Promise<unknown>;
    // Every call carries a gRPC deadline (TEMPORAL_CALL_TIMEOUT_MS): without one, a Temporal that stops
    // answering without closing the connection held purchases unanswered for minutes. Past it the call fails
    // as DEADLINE_EXCEEDED (→ 503); a start that timed out may still have begun, which the purchase route
    // allows for (it keeps the reservation unless Temporal says there is no workflow).
    client.withDeadline(Date.now() + config.TEMPORAL_CALL_TIMEOUT_MS, () => run(...request.args)).then(
      (value) => port.postMessage({ id: request.id, value } satisfies ThreadReply),
      (err: unknown) => port.postMessage({ id: request.id, error: serialize(err) } satisfies ThreadReply),
    );
  });
  port.postMessage({ id: 0, value: 'connected' } satisfies ThreadReply);
}

void main();
