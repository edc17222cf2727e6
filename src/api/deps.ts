/**
 * What the API's routes are built from: the clients and per-process state that src/api/main.ts assembles
 * (tests assemble the same), handed to each route factory.
 */
import type { Pool } from 'pg';
import type { Config } from '../config';
import type { Logger } from '../infra/logger';
import type { Orders } from '../order/store';
import type { ReservationStore } from '../reservation/store';
import type { FlashRedis } from '../reservation/client';
import type { Starter } from '../starter/starter';
import type { Catalog } from './catalog';
import type { Metrics } from './metrics';
import type { OrderWorkflows } from '../workflows/client';
import type { SoldOutFlags } from './soldOut';

/** Each store the API needs, up or down, with the reason of those down. */
export type DependencyStatus = Record<'redis' | 'postgres' | 'temporal', { up: true } | { up: false; reason: string }>;

export interface AppDeps {
  config: Config;
  log: Logger;
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  /** The order's life: the only code that writes an order's state. */
  orders: Orders;
  workflows: OrderWorkflows;
  catalog: Catalog;
  soldOut: SoldOutFlags;
  metrics: Metrics;
  starter: Pick<Starter, 'notice'>;
  /** The stores' status as last checked on a timer (src/api/polled.ts, dependencyChecks), for /readyz. */
  dependencies: () => Promise<DependencyStatus>;
}
