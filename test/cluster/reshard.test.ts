/**
 * The slot of a sale's shard moved to another master of the local Redis Cluster in the middle of a burst of
 * purchases (MIGRATING/IMPORTING, MIGRATE, the clients redirected with ASK and MOVED): no reservation lost or
 * doubled, no 5xx but 503 with Retry-After, every shard's units accounted for; the load's placement check then
 * names the shard that shares a master. The slot is moved back afterwards.
 */
import { randomUUID } from 'node:crypto';
import calculateSlot from 'cluster-key-slot';
import { startApi, type RunningApi } from '../../src/api/main';
import { shardUnits } from '../../src/reservation/layout';
import { repairClaims } from '../../src/reservation/claims';
import { migrateSlot } from '../support/localCluster';
import { buyerToken, connectClients, createTestSale, type Clients } from '../support/helpers';
import { http, type ApiReply } from '../support/openapi';
import { clusterConfig, clusterNodesInfo, masterOf } from '../support/cluster';
import { sharedMasters } from '../../src/reservation/placement';

const BUYERS = 400;
const UNITS = 300;
// No starter: the orders stay in their start queues (deleted with the suite's sales), no workflow to clean up.
const config = clusterConfig({ STARTER_IN_API: 'false' });

let clients: Clients;
let api: RunningApi;

beforeAll(async () => {
  clients = connectClients(config);
  api = await startApi(config);
});

afterAll(async () => {
  await api?.close();
  await clients?.close();
});

test('a shard’s slot migrated to another master during a burst: none lost or doubled, only 503 as 5xx, units accounted per shard', async () => {
  const sale = await createTestSale(clients, { quantities: [UNITS], stockShards: [3] });
  const itemId = sale.items[0].itemId;
  const layout = await clients.store.layouts.get(sale.saleId);
  const slot = calculateSlot(layout.tags[0]);
  const from = masterOf(layout.tags[0]) as string;
  const to = masterOf(layout.tags[1]) as string;
  const run = randomUUID().slice(0, 8);
  const tokens = await Promise.all(Array.from({ length: BUYERS }, (_, i) => buyerToken(config, `reshard-${run}-${i}`)));
  const call = http(api.url);

  const replies: ApiReply[] = new Array(BUYERS);
  let next = 0;
  let answered = 0;
  let migration: Promise<number> | undefined;
  const lane = async () => {
    while (next < BUYERS) {
      const i = next++;
      replies[i] = await call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token: tokens[i] });
      if (++answered === Math.floor(BUYERS / 4)) migration = migrateSlot(slot, Number(to.split(':')[1]));
    }
  };
  await Promise.all(Array.from({ length: 30 }, lane));
  const moved = await migration;

  expect(moved).toBeGreaterThan(0);
  expect(masterOf(layout.tags[0], clusterNodesInfo())).toBe(to);
  expect(replies.filter((r) => ![202, 410, 503].includes(r.status)).map((r) => r.status)).toEqual([]);
  for (const r of replies.filter((x) => x.status === 503)) expect(r.headers.get('retry-after')).toMatch(/^\d+$/);

  // A purchase cut off between its claim and its outcome leaves a claim: repaired as the starters would.
  await repairClaims(clients.redis, clients.store.layouts, sale.saleId, 0);
  const reservations = await clients.store.view.reservations(sale.saleId);
  const held = new Set(reservations.map((r) => r.orderId));
  expect(held.size).toBe(reservations.length);
  const accepted = replies.filter((r) => r.status === 202).map((r) => r.body.orderId as string);
  expect(accepted.filter((id) => !held.has(id))).toEqual([]);
  // Every reservation has its buyer's entry, and no buyer two.
  const buyers = await clients.store.view.buyers(sale.saleId);
  expect(new Set(reservations.map((r) => r.userId)).size).toBe(reservations.length);
  expect(reservations.filter((r) => buyers.get(r.userId) !== r.orderId)).toEqual([]);
  expect(buyers.size).toBe(reservations.length);
  expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
  // Per shard, its free units and the units of the reservations taken from it are its run of units, each once (I2).
  const free = (await clients.store.view.unitsByShard(sale.saleId, [itemId])).get(itemId) ?? [];
  for (let k = 0; k < 3; k++) {
    const units = [...(free[k] as number[]), ...reservations.filter((r) => r.stockShard === k).map((r) => r.unit as number)];
    expect(units.sort((a, b) => a - b)).toEqual(shardUnits(UNITS, 3, k));
  }
  if (replies.some((r) => r.status === 410)) expect(reservations).toHaveLength(UNITS);
  // Shard 0 now shares its master with shard 1: the placement check says so.
  expect(await sharedMasters(clients.store.redis, clients.store.layouts, sale.saleId)).toEqual([`shard 0: ${to}`, `shard 1: ${to}`]);

  await migrateSlot(slot, Number(from.split(':')[1]));
  expect(await sharedMasters(clients.store.redis, clients.store.layouts, sale.saleId)).toEqual([]);
});
