/**
 * The Temporal client side of the service: connecting, and the calls the API and the starter make on order
 * workflows (workflow id = orderId). Every call carries a gRPC deadline (TEMPORAL_CALL_TIMEOUT_MS): a Temporal
 * that stops answering without closing the connection must not hold a caller for minutes.
 */
import { Client, type ClientInterceptors, Connection, NamespaceNotFoundError, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, WorkflowNotFoundError } from '@temporalio/client';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';
import { temporal } from '@temporalio/proto';
import type { Config } from '../config';
import { temporalConnection } from '../infra/connections';
import type { CancelReason, OrderInput, Payment } from '../order/types';
import { cancelledSignal, ItemIdKey, OrderStatusKey, paidSignal, SaleIdKey, startNowSignal, UserIdKey } from './definitions';

/** Connects to the configured Temporal frontend. @throws when it is unreachable */
export async function connectTemporal(config: Config): Promise<Client> {
  const connection = await Connection.connect(temporalConnection(config));
  return new Client({ connection, namespace: config.TEMPORAL_NAMESPACE, interceptors: clientInterceptors(config) });
}

/**
 * With tracing on (src/tracing/index.ts), Temporal's OpenTelemetry interceptor: a start, signal or update runs in a
 * span of its own and carries the active context to the workflow in its headers.
 */
function clientInterceptors(config: Pick<Config, 'OTEL_TRACES_EXPORTER'>): ClientInterceptors {
  return config.OTEL_TRACES_EXPORTER === 'none' ? {} : { workflow: [new OpenTelemetryWorkflowClientInterceptor()] };
}

/**
 * The start options of an order's one run, whoever starts it (the starter, or a payment with a start): id =
 * orderId, never reused (I4), and the search attributes the Web UI filters on.
 */
export function orderStartOptions(taskQueue: string, order: Pick<OrderInput, 'orderId' | 'saleId' | 'itemId' | 'userId'>) {
  return {
    workflowId: order.orderId,
    taskQueue,
    workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    typedSearchAttributes: [
      { key: OrderStatusKey, value: 'PENDING' },
      { key: SaleIdKey, value: order.saleId },
      { key: ItemIdKey, value: order.itemId },
      { key: UserIdKey, value: order.userId },
    ],
  };
}

/**
 * Starts orderWorkflow for a reserved unit (orderStartOptions).
 * @throws WorkflowExecutionAlreadyStartedError for a duplicate, connection errors when Temporal is unreachable
 */
export async function startOrderWorkflow(client: Client, taskQueue: string, order: OrderInput): Promise<void> {
  await client.workflow.start('orderWorkflow', { ...orderStartOptions(taskQueue, order), args: [order] });
}

/**
 * The starter's start of an order in its turn: starts orderWorkflow (I4), or, where the id has a run, sends it
 * `startNow` with a start, so that a run a `paid` signal created with a start delay runs from the drain's turn
 * on (docs/design.md, "Payments before the start"); a run that has closed (REJECT_DUPLICATE) is left as it is.
 * @returns 'already-started' when that workflow id exists
 * @throws connection errors when Temporal is unreachable
 */
export async function startInTurn(client: Client, taskQueue: string, order: OrderInput): Promise<'started' | 'already-started'> {
  try {
    await startOrderWorkflow(client, taskQueue, order);
    return 'started';
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
  try {
    await client.workflow.signalWithStart('orderWorkflow', { ...orderStartOptions(taskQueue, order), args: [order], signal: startNowSignal });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
  return 'already-started';
}

/**
 * Temporal wraps the gRPC failure in `cause` ("Failed to start workflow" ← "14 UNAVAILABLE: …"): its message
 * and code are lifted onto the error, so that the API's isUnavailable (→ 503) and the starter's back-off see
 * the status, and logs keep it. A missing namespace is a deployment fault, reported like an unreachable server.
 */
function lifted(err: unknown): Error {
  const e = err as { name?: unknown; message?: unknown; code?: unknown; cause?: { message?: unknown; code?: unknown } };
  if (err instanceof NamespaceNotFoundError) return Object.assign(new Error(`UNAVAILABLE: ${err.message}`, { cause: err }), { name: 'ServiceError' });
  const cause = typeof e?.cause?.message === 'string' ? `: ${e.cause.message}` : '';
  return Object.assign(new Error(`${String(e?.message ?? err)}${cause}`, { cause: err }), { name: String(e?.name ?? 'Error'), code: e?.code ?? e?.cause?.code });
}

/** The calls the API and the starter make on order workflows. Failures reject with a lifted Temporal error. */
export class OrderWorkflows {
  private constructor(
    private readonly client: Client,
    private readonly config: Pick<Config, 'TEMPORAL_TASK_QUEUE' | 'TEMPORAL_CALL_TIMEOUT_MS'>,
  ) {}

  /** Connects. @throws a lifted error when Temporal is unreachable */
  static async connect(config: Config): Promise<OrderWorkflows> {
    return new OrderWorkflows(await connectTemporal(config).catch((err: unknown) => Promise.reject(lifted(err))), config);
  }

  private call<T>(work: () => Promise<T>): Promise<T> {
    return this.client.withDeadline(Date.now() + this.config.TEMPORAL_CALL_TIMEOUT_MS, work).catch((err: unknown) => Promise.reject(lifted(err)));
  }

  /** Starts orderWorkflow in the drain's turn (startInTurn). @returns 'already-started' when that workflow id exists */
  start(order: OrderInput): Promise<'started' | 'already-started'> {
    return this.call(() => startInTurn(this.client, this.config.TEMPORAL_TASK_QUEUE, order));
  }

  /**
   * Signals `paid` to the order's workflow, so that it settles a payment PostgreSQL has accepted now.
   * @returns 'not-found' when the workflow has ended or is not started yet
   */
  signalPaid(orderId: string, payment: Payment): Promise<'signalled' | 'not-found'> {
    return this.signal(() => this.client.workflow.getHandle(orderId).signal(paidSignal, payment));
  }

  /**
   * Signals `cancelled` to the order's workflow, so that it settles a cancel PostgreSQL has decided now.
   * @returns 'not-found' when the workflow has ended or is not started yet (it reads the row when it places)
   */
  signalCancelled(orderId: string, reason: CancelReason): Promise<'signalled' | 'not-found'> {
    return this.signal(() => this.client.workflow.getHandle(orderId).signal(cancelledSignal, { reason }));
  }

  private signal(send: () => Promise<void>): Promise<'signalled' | 'not-found'> {
    return this.call(() =>
      send().then(
        () => 'signalled' as const,
        (err: unknown) => (err instanceof WorkflowNotFoundError ? ('not-found' as const) : Promise.reject(err)),
      ),
    );
  }

  /** Resolves when the configured namespace answers (for /readyz). */
  checkNamespace(): Promise<void> {
    return this.call(async () => {
      await this.client.connection.workflowService.describeNamespace({ namespace: this.client.options.namespace });
    });
  }

  /** @returns the workflow tasks waiting for a worker on the order task queue (Temporal's approximate count) */
  taskBacklog(): Promise<number> {
    return this.call(async () => {
      const { stats } = await this.client.workflowService.describeTaskQueue({
        namespace: this.client.options.namespace,
        taskQueue: { name: this.config.TEMPORAL_TASK_QUEUE, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        reportStats: true,
      });
      return Number(stats?.approximateBacklogCount ?? 0);
    });
  }

  /** Closes the connection; calls after it reject. */
  async close(): Promise<void> {
    await this.client.connection.close();
  }
}
