/** Temporal client side: connecting, and starting an order's workflow (workflow id = orderId). */
import { Client, Connection, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Config } from './config';
import type { OrderInput } from './order/types';
import { ItemIdKey, OrderStatusKey, SaleIdKey, UserIdKey } from './workflows/definitions';

/** Connects to the configured Temporal frontend. @throws when it is unreachable */
export async function connectTemporal(config: Config): Promise<Client> {
  const connection = await Connection.connect({ address: `${config.TEMPORAL_HOST}:${config.TEMPORAL_PORT}` });
  return new Client({ connection, namespace: config.TEMPORAL_NAMESPACE });
}

/**
 * Starts orderWorkflow for a reserved unit, with the search attributes the Web UI filters on.
 * The id may never be reused, so a duplicate start cannot make a second workflow for one order (I4).
 * @throws WorkflowExecutionAlreadyStartedError for a duplicate, connection errors when Temporal is unreachable
 */
export async function startOrderWorkflow(client: Client, taskQueue: string, order: OrderInput): Promise<void> {
  await client.workflow.start('orderWorkflow', {
    workflowId: order.orderId,
    taskQueue,
    args: [order],
    workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    typedSearchAttributes: [
      { key: OrderStatusKey, value: 'PENDING' },
      { key: SaleIdKey, value: order.saleId },
      { key: ItemIdKey, value: order.itemId },
      { key: UserIdKey, value: order.userId },
    ],
  });
}
