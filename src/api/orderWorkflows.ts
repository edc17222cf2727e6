/**
 * The API's gateway to the order workflows, with @temporalio/client running in a worker thread
 * (temporalThread.ts). Why a thread: the client keeps each call's deadline and metadata in an
 * AsyncLocalStorage, and in Node 20 an enabled AsyncLocalStorage installs an async hook that every promise
 * and async resource of its thread then pays, every sold-out answer included (tools/bench/soldout.ts: a bare Koa
 * server with one AsyncLocalStorage enabled answered ~13% fewer requests a second than without). In its own
 * thread that hook only costs the Temporal calls, which are a few per cent of the requests.
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Config } from '../config';
import type { Logger } from '../logger';
import type { OrderInput, Payment } from '../order/types';

/** What the API asks of Temporal. Unmapped failures reject with an Error carrying Temporal's name, message and code. */
export interface Operations {
  /** Starts orderWorkflow, workflow id = orderId (I4); 'already-started' when that id exists. */
  start(order: OrderInput): Promise<'started' | 'already-started'>;
  /**
   * Signals `paid` to the order's workflow, so that it settles a payment PostgreSQL has accepted now rather
   * than when its timer fires; 'not-found' when the workflow has ended or is not started yet.
   */
  signalPaid(orderId: string, payment: Payment): Promise<'signalled' | 'not-found'>;
  /** Resolves when the configured namespace answers (for /readyz). */
  checkNamespace(): Promise<void>;
  /** @returns the workflow tasks waiting for a worker on the order task queue (Temporal's approximate count) */
  taskBacklog(): Promise<number>;
}

export interface OrderWorkflows extends Operations {
  /** Closes the connection and stops the thread; calls after it reject. */
  close(): Promise<void>;
}

export interface SerializedError {
  name: string;
  message: string;
  code?: unknown;
  stack?: string;
}

/** A message to the thread; id 0 is reserved for the thread's "connected" (or failed) answer. */
export interface ThreadRequest {
  id: number;
  op: keyof Operations | 'close';
  args: unknown[];
}

export type ThreadReply = { id: number; value: unknown } | { id: number; error: SerializedError };

/** An Error the API's error replies classify as Temporal's would be (isUnavailable reads name, message and code). */
function revive({ name, message, code, stack }: SerializedError): Error {
  return Object.assign(new Error(message), { name, code, ...(stack && { stack }) });
}

/** Named as Temporal names an unreachable server, so the API answers 503 with Retry-After. */
function unavailable(why: string): Error {
  return revive({ name: 'ServiceError', message: `UNAVAILABLE: ${why}` });
}

/** Wait between a lost thread and its replacement, and between failed restarts (ms). */
const RESTART_DELAY_MS = 1000;

interface ClientThread {
  call<T>(op: ThreadRequest['op'], ...args: unknown[]): Promise<T>;
  /** Rejects the calls in flight with `reason` and stops the thread. */
  stop(reason: Error): Promise<void>;
}

/**
 * Starts one client thread and waits for it to connect.
 * @param onLost called once if the thread dies after connecting (its calls in flight have been rejected)
 * @throws the connection's error when Temporal is unreachable, or the thread's own when it cannot start
 */
async function spawnThread(config: Config, onLost: (reason: Error) => void): Promise<ClientThread> {
  // The thread has its own module loader: tsx compiles its TypeScript, under `npm run api` and Jest alike.
  const tsx = JSON.stringify(require.resolve('tsx/cjs/api'));
  const entry = JSON.stringify(join(__dirname, 'temporalThread.ts'));
  const worker = new Worker(`require(${tsx}).register(); require(${entry});`, { eval: true, workerData: config });
  const pending = new Map<number, { resolve(value: unknown): void; reject(err: Error): void }>();
  let stopped: Error | undefined;
  let connected = false;
  const stop = (reason: Error) => {
    if (stopped) return;
    stopped = reason;
    for (const call of pending.values()) call.reject(reason);
    pending.clear();
    if (connected) onLost(reason);
  };
  worker.on('error', (err) => stop(unavailable(`Temporal client thread failed: ${err.message}`)));
  worker.on('exit', (code) => stop(unavailable(`Temporal client thread exited with ${code}`)));
  worker.on('message', (reply: ThreadReply) => {
    const call = pending.get(reply.id);
    pending.delete(reply.id);
    if ('error' in reply) call?.reject(revive(reply.error));
    else call?.resolve(reply.value);
  });

  try {
    await new Promise((resolve, reject) => pending.set(0, { resolve, reject }));
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  connected = true;
  let nextId = 1;
  const call = <T>(op: ThreadRequest['op'], ...args: unknown[]): Promise<T> => {
    if (stopped) return Promise.reject(stopped);
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      worker.postMessage({ id, op, args } satisfies ThreadRequest);
    });
  };
  return {
    call,
    async stop(reason: Error) {
      connected = false;
      await call('close').catch(() => undefined);
      stop(reason);
      await worker.terminate();
    },
  };
}

/**
 * Starts the client thread and connects it to the configured Temporal frontend. A thread that dies later
 * (a bug, an uncaught error in the client) is logged and replaced after RESTART_DELAY_MS, retrying until it
 * connects; meanwhile calls reject as unavailable (503), as while Temporal itself is down.
 * @throws the connection's error (name, message, code) when Temporal is unreachable or the thread cannot start
 */
export async function startOrderWorkflows(config: Config, log: Logger): Promise<OrderWorkflows> {
  let closed = false;
  let restarting: NodeJS.Timeout | undefined;
  let current: ClientThread | undefined;
  const restart = () => {
    restarting = setTimeout(() => {
      restarting = undefined;
      spawnThread(config, lost).then(
        (thread) => {
          if (closed) return void thread.stop(unavailable('Temporal client closed'));
          current = thread;
          log.warn('Temporal client thread restarted');
        },
        (err: unknown) => {
          log.error({ err }, 'Temporal client thread could not restart; trying again');
          if (!closed) restart();
        },
      );
    }, RESTART_DELAY_MS);
  };
  function lost(reason: Error): void {
    current = undefined;
    if (closed) return;
    log.error({ err: reason }, 'Temporal client thread lost; restarting it');
    restart();
  }
  current = await spawnThread(config, lost);

  const call = <T>(op: ThreadRequest['op'], ...args: unknown[]): Promise<T> =>
    current ? current.call<T>(op, ...args) : Promise.reject(unavailable(closed ? 'Temporal client closed' : 'Temporal client thread restarting'));
  return {
    start: (order) => call('start', order),
    signalPaid: (orderId, payment) => call('signalPaid', orderId, payment),
    checkNamespace: () => call('checkNamespace'),
    taskBacklog: () => call('taskBacklog'),
    async close() {
      closed = true;
      clearTimeout(restarting);
      const thread = current;
      current = undefined;
      await thread?.stop(unavailable('Temporal client closed'));
    },
  };
}
