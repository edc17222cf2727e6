/**
 * The API's gateway to the order workflows, with @temporalio/client running in a worker thread
 * (temporalThread.ts). Why a thread: the client keeps each call's deadline and metadata in an
 * AsyncLocalStorage, and in Node 20 an enabled AsyncLocalStorage installs an async hook that every promise
 * and async resource of its thread then pays, every sold-out answer included (bench/soldout.ts: a bare Koa
 * server with one AsyncLocalStorage enabled answered ~13% fewer requests a second than without). In its own
 * thread that hook only costs the Temporal calls, which are a few per cent of the requests.
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Config } from '../config';
import type { OrderInput, OrderStatus, PayResult, Payment } from '../domain';

/** An order as its workflow's search attributes tell it (before PostgreSQL has it). */
export interface WorkflowOrder {
  userId: string;
  saleId: number;
  itemId: number;
  status: OrderStatus;
}

/**
 * The `pay` update's answer, or why there is none: AMOUNT_MISMATCH and `invalid` were refused by the update's
 * validator (nothing written, I7); `notFound` means no running workflow (ended, or never existed).
 */
export type PayOutcome = PayResult | { refused: 'AMOUNT_MISMATCH' } | { invalid: string } | { notFound: true };

/** What the API asks of Temporal. Unmapped failures reject with an Error carrying Temporal's name, message and code. */
export interface Operations {
  /** Starts orderWorkflow, workflow id = orderId (I4); 'already-started' when that id exists. */
  start(order: OrderInput): Promise<'started' | 'already-started'>;
  /** @returns the order's search attributes, undefined when there is no such workflow */
  describe(orderId: string): Promise<WorkflowOrder | undefined>;
  /** Sends the payment service's word through the `pay` update. */
  pay(orderId: string, payment: Payment): Promise<PayOutcome>;
  /** Resolves when the configured namespace answers (for /readyz). */
  checkNamespace(): Promise<void>;
}

export interface OrderWorkflows extends Operations {
  /** Closes the connection and stops the thread; calls after it reject. */
  close(): Promise<void>;
}

interface SerializedError {
  name: string;
  message: string;
  code?: unknown;
}

/** A message to the thread; id 0 is reserved for the thread's "connected" (or failed) answer. */
export interface ThreadRequest {
  id: number;
  op: keyof Operations | 'close';
  args: unknown[];
}

export type ThreadReply = { id: number; value: unknown } | { id: number; error: SerializedError };

/** An Error the API's error replies classify as Temporal's would be (isUnavailable reads name, message and code). */
function revive({ name, message, code }: SerializedError): Error {
  return Object.assign(new Error(message), { name, code });
}

/**
 * Starts the thread and connects it to the configured Temporal frontend.
 * @throws the connection's error (name, message, code) when Temporal is unreachable or the thread cannot start
 */
export async function startOrderWorkflows(config: Config): Promise<OrderWorkflows> {
  // The thread has its own module loader: tsx compiles its TypeScript, under `npm run api` and Jest alike.
  const tsx = JSON.stringify(require.resolve('tsx/cjs/api'));
  const entry = JSON.stringify(join(__dirname, 'temporalThread.ts'));
  const worker = new Worker(`require(${tsx}).register(); require(${entry});`, { eval: true, workerData: config });
  const pending = new Map<number, { resolve(value: unknown): void; reject(err: Error): void }>();
  let stopped: Error | undefined;
  const stop = (err: Error) => {
    stopped ??= err;
    for (const call of pending.values()) call.reject(stopped);
    pending.clear();
  };
  // Named as Temporal names an unreachable server, so a call in flight when the thread dies answers 503.
  worker.on('error', (err) => stop(revive({ name: 'ServiceError', message: `UNAVAILABLE: Temporal client thread failed: ${err.message}` })));
  worker.on('exit', (code) => stop(revive({ name: 'ServiceError', message: `UNAVAILABLE: Temporal client thread exited with ${code}` })));
  worker.on('message', (reply: ThreadReply) => {
    const call = pending.get(reply.id);
    pending.delete(reply.id);
    if ('error' in reply) call?.reject(revive(reply.error));
    else call?.resolve(reply.value);
  });

  let nextId = 1;
  const call = <T>(op: ThreadRequest['op'], ...args: unknown[]): Promise<T> => {
    if (stopped) return Promise.reject(stopped);
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      worker.postMessage({ id, op, args } satisfies ThreadRequest);
    });
  };

  try {
    await new Promise((resolve, reject) => pending.set(0, { resolve, reject }));
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  return {
    start: (order) => call('start', order),
    describe: (orderId) => call('describe', orderId),
    pay: (orderId, payment) => call('pay', orderId, payment),
    checkNamespace: () => call('checkNamespace'),
    async close() {
      await call('close').catch(() => undefined);
      stop(revive({ name: 'ServiceError', message: 'UNAVAILABLE: Temporal client closed' }));
      await worker.terminate();
    },
  };
}
