/**
 * Redis dropping every connection of the service over and over during a burst (`CLIENT KILL TYPE normal` every
 * 20 ms on the single Redis, and on each master of the local cluster for an item over 3 stock shards), through
 * the real API (with its starter), worker, Temporal, Kafka and PostgreSQL. No command is resent by ioredis; the
 * store runs its idempotent scripts again (src/reservation/client.ts). Checked: every press answered within the
 * timeout (a 503 at worst), no buyer who pressed once hears 409, no command reaches a replica, every order that
 * took a unit ends (the audit), every unit back on its shard once the orders expired, and the API and the starter
 * keep working afterwards. Every response is checked against openapi.yaml.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import type { Config } from '../src/config';
import { shardQuantity } from '../src/reservation/layout';
import { useAppHarness } from './support/apiHarness';
import { bounded, buyerToken, createTestSale, orderResult, settledAudit, testConfig, until } from './support/helpers';
import type { ApiReply } from './support/openapi';
import { dropConnections } from './support/connectionDrops';
import { clusterConfig, clusterNodesInfo } from './support/cluster';

jest.setTimeout(240_000);

/** A press unanswered this long counts as lost (ms). */
const PRESS_TIMEOUT_MS = 10_000;

/** Short enough for claims (and start-queue entries) left by a dropped connection to be repaired within the test. */
const FAST_REPAIR = { TEMPORAL_CALL_TIMEOUT_MS: '2000', STARTER_CLAIM_IDLE_MS: '3000' };

const modes = [
  { name: 'single Redis: 800 buyers once each for 400 units', config: () => testConfig(FAST_REPAIR), units: 400, shards: 1, buyers: 800, ports: (c: Config) => [c.REDIS_PORT] },
  {
    name: 'Redis Cluster: 600 buyers once each for 300 units over 3 shards',
    config: () => clusterConfig(FAST_REPAIR),
    units: 300,
    shards: 3,
    buyers: 600,
    ports: () => clusterNodesInfo().filter((n) => n.master && !n.failed).map((n) => n.port),
  },
];

describe.each(modes)('$name', (mode) => {
  const config = mode.config();
  /** The API's (and its starter's) log lines, warnings and errors. */
  const logged: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logged.push(chunk.toString());
      done();
    },
  });
  const app = useAppHarness(config, 'connection-storm', pino({ level: 'warn' }, sink));

  test('connections dropped every 20 ms: every press answered, no 409, every order ends, every unit back on its shard', async () => {
    const { clients, call, temporal } = app;
    const sale = await createTestSale(clients, { quantities: [mode.units], stockShards: [mode.shards], paymentWindowMs: 4000 });
    const itemId = sale.items[0].itemId;
    const tokens = await Promise.all(Array.from({ length: mode.buyers }, (_, i) => buyerToken(config, `storm-${sale.saleId}-${i}`)));
    const press = (token: string) => call('POST', `/api/flash-sales/items/${itemId}/purchase`, { token, timeoutMs: PRESS_TIMEOUT_MS });

    const storm = dropConnections(mode.ports(config), 20);
    const replies = await bounded(
      100,
      tokens.map((token) => () => press(token).catch((err: Error) => err)),
    );
    const { connectionsClosed } = await storm.stop();

    expect(connectionsClosed).toBeGreaterThan(50);
    const unanswered = replies.filter((r): r is Error => r instanceof Error);
    expect(unanswered.map((e) => e.message)).toEqual([]);
    const answered = replies as ApiReply[];
    const statuses: Record<number, number> = {};
    for (const r of answered) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    expect(Object.keys(statuses).filter((s) => !['202', '410', '503'].includes(s))).toEqual([]);
    // A command sent to a replica, or a redirect left to the caller, would be logged as the 503's cause.
    expect(logged.filter((line) => /READONLY|MOVED|ASK /.test(line))).toEqual([]);
    const accepted = answered.flatMap((r) => (r.status === 202 || (r.status === 503 && r.body.orderId) ? [r.body.orderId as string] : []));
    expect(statuses[202] ?? 0).toBeGreaterThan(0);
    expect(statuses[202] ?? 0).toBeLessThanOrEqual(mode.units);

    // Afterwards the API answers a new buyer, and the starter starts that order's workflow. The buyer's client
    // honours Retry-After, as a real one does: the storm's last drop may still be reconnecting (no offline queue).
    const lateToken = await buyerToken(config, `storm-${sale.saleId}-late`);
    let late = await press(lateToken);
    for (let attempt = 1; late.status === 503 && !late.body.orderId && attempt < 4; attempt += 1) {
      await new Promise((r) => setTimeout(r, Number(late.headers.get('retry-after') ?? 1) * 1000));
      late = await press(lateToken);
    }
    expect([202, 410]).toContain(late.status);
    if (late.status === 202) {
      accepted.push(late.body.orderId as string);
      expect(await orderResult(temporal, late.body.orderId as string)).toMatchObject({ status: 'EXPIRED' });
    }

    // Nobody pays: every order that took a unit expires (with or without a 202: the audit counts the sale's workflows
    // against its rows and Redis), and each unit is back on the shard it came from. A press answered 503 without
    // an order id may still have taken a unit (its reply lost after the script ran): its entry waits for the claim
    // sweep (STARTER_CLAIM_IDLE_MS), so the sale has settled only once no reservation is left; what is left after
    // the wait, the audit and the checks below name.
    await until('every reservation released', async () => (await clients.store.view.reservations(sale.saleId)).length === 0, 150_000).catch(() => undefined);
    expect(await settledAudit(config, clients, temporal, sale.saleId, accepted, 150_000)).toEqual([]);
    expect((await clients.store.view.stockByShard(sale.saleId, [itemId])).get(itemId)).toEqual(Array.from({ length: mode.shards }, (_, k) => shardQuantity(mode.units, mode.shards, k)));
    expect(await clients.store.view.reservations(sale.saleId)).toEqual([]);
    expect(await clients.store.view.claims(sale.saleId)).toEqual([]);
  });
});
