/** The starter of one process (the API's, the worker's or `npm run starter`'s), wired from the configuration. */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Pool } from 'pg';
import { context } from '@opentelemetry/api';
import type { Config } from '../config';
import { isConstraintViolation } from '../infra/db';
import type { Logger } from '../infra/logger';
import { Orders } from '../order/store';
import type { OrderInput } from '../order/types';
import { repairClaims } from '../reservation/claims';
import { Reconciler } from '../reservation/reconciler';
import type { FlashRedis } from '../reservation/client';
import type { ReservationStore } from '../reservation/store';
import { StartQueue } from '../reservation/startQueue';
import { ATTR, activeTraceParent, contextOf, inSpan } from '../tracing';
import type { OrderWorkflows } from '../workflows/client';
import { closedMark } from '../sale/controls';
import { closedSaleIds, reconciledSaleIds } from '../sale/recent';
import { findSale } from '../sale/sales';
import { AcceptanceGate, BacklogGate } from './gates';
import { RecentSales } from './recentSales';
import { Starter, type StartHooks } from './starter';

/**
 * Stores the order before its workflow exists (Orders.place: PENDING with its unit, or REJECTED), so that from
 * here on PostgreSQL knows every order that holds a unit and a rebuild cannot miss it (src/reservation/loading.ts).
 * An order PostgreSQL cannot store at all (a constraint it cannot meet) is left to its workflow, whose own place
 * meets the same refusal and ends it REJECTED.
 * @throws pg errors other than constraint violations (PostgreSQL unreachable): the start is tried again later
 */
async function store(orders: Orders, order: OrderInput): Promise<void> {
  try {
    await orders.place(order, activeTraceParent());
  } catch (err) {
    if (!isConstraintViolation(err)) throw err;
  }
}

/**
 * The starter of one process (the API's, or `npm run starter`'s), from the configuration: it polls the recent
 * sales' start queues over `redis` (a connection of its own: its reads must not queue behind the purchases'
 * scripts), repairs claims through `store`, as a consumer named after the host and process, and starts on the configured task queue.
 * @param hooks what the process does with each start, failure and backlog reading (metrics)
 */
export function createStarter(
  config: Config,
  clients: { redis: FlashRedis; store: ReservationStore; pool: Pool; workflows: OrderWorkflows; log: Logger },
  hooks: StartHooks,
): Starter {
  const recentSales = new RecentSales(clients.pool, config.CATALOG_REFRESH_MS);
  const reconciled = new RecentSales(clients.pool, config.CATALOG_REFRESH_MS, reconciledSaleIds);
  const orders = new Orders(clients.pool, clients.store.view);
  const { onBacklog, ...onStart } = hooks;
  const consumer = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const queue = new StartQueue(clients.redis, clients.store.layouts);
  const closed = new RecentSales(clients.pool, config.CATALOG_REFRESH_MS, closedSaleIds);
  // The sales the loop watches, those this process has just accepted in among them (the lists lag), less those
  // closed by their times: a recent sale's queue may be long, but no stampede fills it. A list that lags errs
  // towards reading.
  let watched: () => readonly number[] = () => [];
  const acceptance = new AcceptanceGate(config.STARTER_YIELD_ABOVE_PER_S, config.STARTER_YIELD_MAX_MS, async () => {
    const isClosed = new Set(await closed.ids());
    const ids = watched().filter((saleId) => !isClosed.has(saleId));
    const counts = await Promise.all(ids.map((saleId) => queue.accepted(saleId)));
    return new Map(ids.map((saleId, i) => [saleId, counts[i]]));
  }, clients.log);
  const reconciler = new Reconciler(
    clients.redis,
    clients.store.layouts,
    clients.pool,
    {
      items: async (saleId) => (await findSale(clients.pool, saleId))?.items.map(({ itemId, quantity }) => ({ itemId, quantity })) ?? [],
      mark: (saleId) => closedMark(clients.pool, saleId),
    },
    { graceMs: config.RECONCILE_GRACE_MS, everyMs: config.RECONCILE_INTERVAL_MS, fullEveryMs: config.RECONCILE_FULL_INTERVAL_MS, leaseMs: 3 * config.RECONCILE_INTERVAL_MS, owner: consumer },
  );
  const starter = new Starter({
    queue,
    repairClaims: (saleId, olderThanMs) => repairClaims(clients.redis, clients.store.layouts, saleId, olderThanMs),
    reconciler: { reconcile: (saleIds, onFailure) => reconciler.round(saleIds, onFailure), everyMs: config.RECONCILE_INTERVAL_MS, gate: acceptance, saleIds: () => reconciled.ids() },
    // The start joins the buyer's trace through its entry's traceparent: a span for the wait and the call, whose
    // child (the Temporal client's) carries the context on to the workflow.
    start: (order, traceParent) =>
      context.with(contextOf(traceParent), () =>
        inSpan('start order', { attributes: { [ATTR.orderId]: order.orderId, [ATTR.saleId]: order.saleId, [ATTR.queueWaitMs]: Date.now() - order.reservedAtMs } }, async () => {
          await store(orders, order);
          return clients.workflows.start(order);
        }),
      ),
    saleIds: () => recentSales.ids(),
    gates: [
      acceptance,
      new BacklogGate(() => clients.workflows.taskBacklog(), config.STARTER_MAX_BACKLOG, onBacklog, clients.log),
    ],
    log: clients.log,
    consumer,
    maxInFlight: config.STARTER_MAX_IN_FLIGHT,
    claimIdleMs: config.STARTER_CLAIM_IDLE_MS,
    ...onStart,
  });
  watched = () => starter.watched();
  return starter;
}
