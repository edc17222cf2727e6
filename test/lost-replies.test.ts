/**
 * A reply lost after Redis ran a script (I1, I2, I3, I5): proxies in front of the single Redis and of each master
 * of the local cluster let every 4th script run and then close the connection instead of passing its reply back
 * (test/support/replyLoss.ts). The store cannot tell whether the script ran, runs it again (client.ts, idempotent), and
 * must get the first run's answer. A crowd presses once each for half as many units as buyers, through the
 * store; then every reservation is released through the same losing proxies, as the orders' expiry does.
 * Before the fix, reserve.lua and claim.lua answered a second run with the buyer's own order (409), and a take
 * (reserve.lua without the buyer check) took a second unit and queued a second start.
 */
import { newOrderId } from '../src/order/orderId';
import type { OrderInput } from '../src/order/types';
import { createRedis, isOutcomeUnknown } from '../src/reservation/client';
import { repairClaims } from '../src/reservation/claims';
import { shardKeys, shardUnits } from '../src/reservation/layout';
import { ReservationStore, type ReserveOutcome } from '../src/reservation/store';
import type { Config } from '../src/config';
import { bounded, connectClients, createTestSale, testConfig, type Clients } from './support/helpers';
import { ReplyLosingProxy } from './support/replyLoss';
import { clusterConfig, clusterNodesInfo } from './support/cluster';

jest.setTimeout(120_000);

const LOSS_EVERY = 4;

interface Mode {
  name: string;
  config: () => Config;
  units: number;
  shards: number;
  buyers: number;
  /** Proxies in front of the mode's nodes, and a store whose client goes through them. */
  lossy(config: Config, clients: Clients): Promise<{ store: ReservationStore; proxies: ReplyLosingProxy[] }>;
}

const modes: Mode[] = [
  {
    name: 'single Redis',
    config: () => testConfig(),
    units: 400,
    shards: 1,
    buyers: 800,
    async lossy(config, clients) {
      const proxy = await ReplyLosingProxy.start(config.REDIS_PORT, LOSS_EVERY);
      return { store: new ReservationStore(createRedis({ ...config, REDIS_PORT: proxy.port }), clients.store.layouts), proxies: [proxy] };
    },
  },
  {
    name: 'Redis Cluster, 3 stock shards',
    config: () => clusterConfig(),
    units: 300,
    shards: 3,
    buyers: 600,
    async lossy(config, clients) {
      const masters = clusterNodesInfo().filter((n) => n.master && !n.failed);
      const proxies = await Promise.all(masters.map((m) => ReplyLosingProxy.start(m.port, LOSS_EVERY)));
      const natMap = Object.fromEntries(masters.map((m, i) => [m.address, { host: '127.0.0.1', port: proxies[i].port }]));
      return { store: new ReservationStore(createRedis(config, { natMap }), clients.store.layouts), proxies };
    },
  },
];

describe.each(modes)('$name', (mode) => {
  let clients: Clients;
  let lossy: { store: ReservationStore; proxies: ReplyLosingProxy[] };

  beforeAll(async () => {
    const config = mode.config();
    clients = connectClients(config);
    lossy = await mode.lossy(config, clients);
  });

  afterAll(async () => {
    lossy?.store.redis.disconnect();
    await Promise.all(lossy?.proxies.map((p) => p.close()) ?? []);
    await clients?.close();
  });

  test('a reply lost after a script ran: no buyer who pressed once hears 409, one unit and one start per order, every unit back after release', async () => {
    const sale = await createTestSale(clients, { quantities: [mode.units], stockShards: [mode.shards] });
    const item = sale.items[0];
    const layout = await clients.store.layouts.get(sale.saleId);
    const orders: OrderInput[] = Array.from({ length: mode.buyers }, (_, i) => ({
      saleId: sale.saleId,
      itemId: item.itemId,
      orderId: newOrderId(sale.saleId),
      userId: `lost-${sale.saleId}-${i}`,
      priceMinor: item.priceMinor,
      reservedAtMs: Date.now(),
      paymentWindowMs: sale.paymentWindowMs,
    }));
    const outcomes = await bounded(
      50,
      orders.map((order) => () => lossy.store.reserve(order).catch((err: Error): ReserveOutcome | Error => err)),
    );
    const lost = lossy.proxies.reduce((a, p) => a + p.lost, 0);
    const kinds: Record<string, number> = {};
    for (const o of outcomes) kinds[o instanceof Error ? 'error' : o.kind] = (kinds[o instanceof Error ? 'error' : o.kind] ?? 0) + 1;
    expect(lost).toBeGreaterThan(10);
    expect(kinds.ALREADY_PURCHASED ?? 0).toBe(0);
    expect(kinds.RESERVED ?? 0).toBeGreaterThan(mode.units / 2);

    // What Redis holds: one reservation per RESERVED order, each order queued for its start exactly once.
    const reserved = orders.filter((_, i) => (outcomes[i] as ReserveOutcome).kind === 'RESERVED').map((o) => o.orderId);
    const held = await clients.store.view.reservations(sale.saleId);
    const heldIds = held.map((r) => r.orderId);
    expect(new Set(heldIds).size).toBe(heldIds.length);
    expect(heldIds).toEqual(expect.arrayContaining(reserved));
    const queued = (
      await Promise.all(layout.tags.map(async (tag) => (await clients.redis.xrange(shardKeys(tag).startQueue, '-', '+')).map(([, fields]) => fields[fields.indexOf('orderId') + 1])))
    ).flat();
    expect(queued.sort()).toEqual([...heldIds].sort());
    // Each RESERVED answer names the unit its reservation holds (a rerun answers the first run's unit), and the
    // free units with the held ones are the item's units 1..units, each once.
    const unitOf = new Map(held.map((r) => [r.orderId, r.unit]));
    const answered = orders.flatMap((o, i) => {
      const outcome = outcomes[i] as ReserveOutcome;
      return outcome.kind === 'RESERVED' ? [[o.orderId, outcome.unit]] : [];
    });
    expect(answered).toEqual(answered.map(([orderId]) => [orderId, unitOf.get(orderId as string)]));
    const free = ((await clients.store.view.unitsByShard(sale.saleId, [item.itemId])).get(item.itemId) as number[][]).flat();
    expect([...free, ...held.map((r) => r.unit as number)].sort((a, b) => a - b)).toEqual(Array.from({ length: mode.units }, (_, i) => i + 1));

    // Presses that failed after their claim (an error, or the lease ran out) left claims: repair settles or undoes them.
    await repairClaims(clients.redis, clients.store.layouts, sale.saleId, 0);
    // A release is a local activity: when its reply is lost at every run `idempotent` makes, Temporal runs it again.
    const releaseAsActivity = async (order: (typeof held)[number]): Promise<void> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await lossy.store.release(order);
        } catch (err) {
          if (attempt >= 5 || !isOutcomeUnknown(err)) throw err;
        }
      }
    };
    await bounded(20, held.map((order) => () => releaseAsActivity(order)));
    // Every unit back on its own shard, once.
    const after = (await clients.store.view.unitsByShard(sale.saleId, [item.itemId])).get(item.itemId) as number[][];
    expect(after.map((units) => [...units].sort((a, b) => a - b))).toEqual(Array.from({ length: mode.shards }, (_, k) => shardUnits(item.quantity, mode.shards, k)));
    expect(await clients.store.view.reservations(sale.saleId)).toEqual([]);
    expect([...(await clients.store.view.buyers(sale.saleId)).keys()]).toEqual([]);
    expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
    expect(lossy.proxies.reduce((a, p) => a + p.lost, 0)).toBeGreaterThan(lost);
  });
});
