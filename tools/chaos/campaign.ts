/**
 * The randomized fault campaign (`npm run chaos`): many short sales on the real stack, each under faults drawn
 * from its seed, each audited once settled. Two API processes and two workers (children, on a task queue of the
 * campaign's own, talking to Temporal through a relay the campaign controls) serve every run; a run creates a
 * small sale, lets a crowd buy through both APIs (repeat presses, presses on a second item), pays a share of
 * the accepted orders through the route and the `paid` signal (some twice, some late, some with a wrong amount
 * first), and meanwhile injects its faults: SIGKILL and restart of an API or a worker; SIGKILL of Redis and its
 * restart on its AOF, or SCRIPT FLUSH; Kafka stopped for longer than the activity timeout; PostgreSQL restarted
 * (fast or immediate shutdown); Temporal stopped and started, or its relay frozen, cut or slowed; on the Redis
 * Cluster (`--cluster`), a master SIGKILLed, a shard's slot migrated, every connection to the masters dropped
 * over and over, or one shard's keys lost and rebuilt, instead of the single node's faults; on the real Temporal
 * server (`--temporal-server`), its history service SIGKILLed or its frontend restarted instead of the dev
 * server's restart. Faults go
 * through scripts/services.sh or the pids of processes the campaign started, nothing else; every wait is
 * bounded. Then it heals everything, waits for the sale to settle and checks it: the product's audit (I1–I5)
 * and the campaign's own rules (checkRun).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { createSigner } from 'fast-jwt';
import type { Pool } from 'pg';
import { request } from 'undici';
import { auditSale, readSaleEvents, saleEventsSince } from '../../src/audit';
import { loadConfig, type Config } from '../../src/config';
import { createPool } from '../../src/infra/db';
import type { OrderStatus } from '../../src/order/types';
import { createKafka } from '../../src/infra/kafka';
import { CROWD_IP_LIMIT, saleGateOf } from '../../test/support/crowd';
import { freePort, startChild, type Child } from '../../test/support/processes';
import calculateSlot from 'cluster-key-slot';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis, type FlashRedis } from '../../src/reservation/client';
import { SaleLayouts, shardKeys, type SaleLayout } from '../../src/reservation/layout';
import { StartQueue } from '../../src/reservation/startQueue';
import { clusterNodes, clusterNodesInfo, masterOf, migrateSlot, nodePid } from '../../test/support/localCluster';
import { dropConnections } from '../../test/support/connectionDrops';
import { createSale, loadSale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { paidSignal } from '../../src/workflows/definitions';
import { Random } from './random';
import { openRelay, type Relay } from '../../test/support/relay';
import { shardPlacer } from '../../src/reservation/placement';
import { realServerPort } from '../shared/procCpu';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export type FaultKind =
  | 'api-kill'
  | 'worker-kill'
  | 'redis-kill'
  | 'redis-script-flush'
  | 'kafka-stop'
  | 'postgres-restart-fast'
  | 'postgres-restart-immediate'
  | 'temporal-restart'
  | 'temporal-freeze'
  | 'temporal-drop'
  | 'temporal-latency'
  | 'redis-master-kill'
  | 'redis-reshard'
  | 'redis-connections-drop'
  | 'redis-shard-loss'
  | 'shard-loss-workers-stopped'
  | 'temporal-history-kill'
  | 'temporal-frontend-restart';

/** How often each kind is drawn (Kafka's is rare: it lasts longer than the activity timeout, 30 s). */
const FAULT_WEIGHTS: [FaultKind, number][] = [
  ['api-kill', 4],
  ['worker-kill', 4],
  ['redis-kill', 3],
  ['redis-script-flush', 2],
  ['kafka-stop', 1],
  ['postgres-restart-fast', 2],
  ['postgres-restart-immediate', 2],
  ['temporal-restart', 2],
  ['temporal-freeze', 2],
  ['temporal-drop', 2],
  ['temporal-latency', 2],
];
/**
 * On the Redis Cluster (`--cluster`): the single node's faults give way to a master SIGKILLed (its replica takes
 * over; the node comes back as a replica), the slot of one of the sale's shards migrated to another master
 * while the sale goes on (ASK, then MOVED; moved back as the repair), every client connection of the masters
 * closed every 20 ms (replies of scripts Redis ran are lost), and one shard's keys deleted at once, as a master
 * restarted empty would lose them, then rebuilt (forced: the other shards kept theirs) as docs/operations.md says.
 */
const CLUSTER_FAULT_WEIGHTS: [FaultKind, number][] = [
  ...FAULT_WEIGHTS.filter(([kind]) => kind !== 'redis-kill'),
  ['redis-master-kill', 3],
  ['redis-reshard', 3],
  ['redis-connections-drop', 3],
  ['redis-shard-loss', 2],
];
/**
 * On the real Temporal server (`--temporal-server`): the dev server's restart gives way to the history service
 * SIGKILLed (its shards' owner gone mid-write; it starts again on the same database) and the frontend stopped
 * and started (every client's calls fail over to retries).
 */
const SERVER_FAULT_WEIGHTS: [FaultKind, number][] = [
  ...FAULT_WEIGHTS.filter(([kind]) => kind !== 'temporal-restart'),
  ['temporal-history-kill', 4],
  ['temporal-frontend-restart', 3],
];

/** The stack a campaign runs on, which chooses its faults: the single node's, the Redis Cluster's, or the real Temporal server's. */
export type FaultSet = 'node' | 'cluster' | 'server';
const FAULT_SETS: Record<FaultSet, [FaultKind, number][]> = { node: FAULT_WEIGHTS, cluster: CLUSTER_FAULT_WEIGHTS, server: SERVER_FAULT_WEIGHTS };
/**
 * Both workers SIGKILLed, then one shard's data lost (a one-node sale's only shard) and rebuilt while they are
 * down, then the workers started again: the orders the starters stored and started meanwhile wait in Temporal,
 * known to PostgreSQL only. Drawn apart from the weighted bag, on a generator of its own, so that every seed
 * keeps the plan it had before this fault existed (the CI seeds' and the ones that found violations).
 */
const SHARD_LOSS_IDLE: { sets: readonly FaultSet[]; chance: number } = { sets: ['node', 'cluster'], chance: 0.25 };
/** Every kind a fault set may draw. */
export const faultKinds = (set: FaultSet): FaultKind[] => [...FAULT_SETS[set].map(([kind]) => kind), ...(SHARD_LOSS_IDLE.sets.includes(set) ? ['shard-loss-workers-stopped' as const] : [])];

/** @returns the seed's shard-loss-workers-stopped fault, if it draws one (on its own generator) */
function planShardLossIdle(seed: number, set: FaultSet): PlannedFault[] {
  if (!SHARD_LOSS_IDLE.sets.includes(set)) return [];
  // A seed of its own, mixed (Knuth's multiplicative hash): nearby seeds start xoroshiro128+ on nearby states.
  const rng = new Random(Math.imul(seed ^ 0x5eed, 0x9e3779b1) >>> 0);
  return rng.chance(SHARD_LOSS_IDLE.chance) ? [{ kind: 'shard-loss-workers-stopped', atMs: rng.int(0, 7000), forMs: rng.int(1000, 5000), target: rng.int(0, 2) }] : [];
}

/** Stock shards of each item of a run on the cluster: one per master. */
const CLUSTER_SHARDS = 3;

/** Longer than the publishing local activity's start-to-close timeout. */
const KAFKA_OUTAGE_MS = 35_000;
const CROWD_MS = 4000;
/** How long the campaign's payment service retries one payment that gets no final answer. */
const PAY_RETRY_MS = 90_000;
const SETTLE_TIMEOUT_MS = 180_000;

export interface PlannedFault {
  kind: FaultKind;
  /** ms after the run's sale opened. */
  atMs: number;
  /** How long the fault lasts before its repair, ms. */
  forMs: number;
  /** Which of the two APIs or workers, for the process faults. */
  target: number;
}

/** What a run saw: every answer it got, and the order ids it was given. */
interface Observed {
  accepted: string[];
  /** Orders whose reservation a shard loss took (redis-shard-loss): those not yet stored in PostgreSQL are gone. */
  lostWithShard: Set<string>;
  fiveHundreds: string[];
  payments: { orderId: string; paymentId: string; channel: 'route' | 'signal'; outcome: string }[];
}

export interface RunResult {
  seed: number;
  saleId: number;
  faults: PlannedFault[];
  orders: Record<string, number>;
  accepted: number;
  /** 202s whose order a shard loss took before PostgreSQL had it: gone by design (docs/operations.md), not a violation. */
  goneWithShard: number;
  payments: number;
  violations: string[];
  durationMs: number;
}

export interface CampaignOptions {
  /** One run per seed, in this order. */
  seeds: readonly number[];
  /** Where the campaign's folder is made (reports/chaos-<time>/ under it). */
  reportDir: string;
  /** Keep the logs of runs that passed too. */
  keepLogs: boolean;
  /**
   * Run on the local Redis Cluster (services.sh up --cluster): items in CLUSTER_SHARDS stock shards, WAIT for a
   * replica before each 202 (REDIS_WAIT_REPLICAS=1), and the cluster's faults (faultKinds('cluster')).
   */
  cluster?: boolean;
  /**
   * Run on the real Temporal server (services.sh up --temporal-server) instead of the dev server, with its
   * faults (faultKinds('server')). Not with `cluster`.
   */
  temporalServer?: boolean;
  print(line: string): void;
}

/** Draws a run's faults from the set's kinds: one to three, at moments within the crowd and the payments. */
export function planFaults(rng: Random, set: FaultSet = 'node'): PlannedFault[] {
  const bag = FAULT_SETS[set].flatMap(([kind, weight]) => Array<FaultKind>(weight).fill(kind));
  return Array.from({ length: rng.int(1, 3) }, () => {
    const kind = rng.pick(bag);
    const forMs = kind === 'kafka-stop' ? KAFKA_OUTAGE_MS : kind === 'temporal-latency' ? rng.int(3000, 6000) : rng.int(1000, 5000);
    return { kind, atMs: rng.int(0, 7000), forMs, target: rng.int(0, 1) };
  }).sort((a, b) => a.atMs - b.atMs);
}

/** The processes and connections a campaign owns; faults act on these and on the stack. */
class Fleet {
  /** Each API slot's process, its public door's port and its internal door's (payments), kept across restarts. */
  apis: (Child & { port: number; internalPort: number })[] = [];
  workers: Child[] = [];
  private incarnation = 0;

  constructor(
    readonly env: NodeJS.ProcessEnv,
    readonly dir: string,
    readonly relay: Relay,
  ) {}

  /** Each slot's start in progress ('api-0', 'worker-1', …), so that a fault on a slot waits for it. */
  private readonly starting = new Map<string, Promise<void>>();

  async startApi(i: number): Promise<void> {
    const port = this.apis[i]?.port ?? (await freePort());
    const internalPort = this.apis[i]?.internalPort ?? (await freePort());
    await this.supervise(
      `api-${i}`,
      () => {
        const env = { ...this.env, API_PORT: String(port), INTERNAL_API_PORT: String(internalPort) };
        const child = startChild(`api-${i}`, 'dist/api/main.js', env, join(this.dir, `api-${i}.${++this.incarnation}.log`), 'api listening');
        return (this.apis[i] = Object.assign(child, { port, internalPort }));
      },
      () => this.apis[i],
    );
  }

  async startWorker(i: number): Promise<void> {
    await this.supervise(
      `worker-${i}`,
      () => (this.workers[i] = startChild(`worker-${i}`, 'dist/worker/main.js', this.env, join(this.dir, `worker-${i}.${++this.incarnation}.log`), 'worker running')),
      () => this.workers[i],
    );
  }

  /** Waits until the slot's start in progress, if any, has ended (up, or given up). */
  async settled(slot: string): Promise<void> {
    await this.starting.get(slot)?.catch(() => undefined);
  }

  /**
   * Starts a slot's process as a supervisor would: a process exits at start when a service it needs is away (a
   * worker without Temporal, an API without Redis), as the campaign's other faults can make it; it is started
   * again, every 2 s, up to 30 times.
   */
  private async supervise(slot: string, start: () => Child, current: () => Child | undefined): Promise<void> {
    await this.settled(slot);
    // Two repairs of one slot (two kills of it, each restarting it): the second finds it up, and leaves it.
    const running = current();
    if (running && running.process.exitCode === null && running.process.signalCode === null) return;
    const run = (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await start().ready;
        } catch (err) {
          if (attempt >= 30) throw err;
          await sleep(2000);
        }
      }
    })();
    this.starting.set(slot, run);
    await run;
  }

  /** Starts again whatever is not running. */
  async heal(): Promise<void> {
    await Promise.all([
      ...this.apis.map((c, i) => (c.process.exitCode !== null || c.process.signalCode !== null ? this.startApi(i) : undefined)),
      ...this.workers.map((c, i) => (c.process.exitCode !== null || c.process.signalCode !== null ? this.startWorker(i) : undefined)),
    ]);
  }

  async stop(): Promise<void> {
    await Promise.allSettled([...this.apis, ...this.workers].map((c) => c.stop()));
  }
}

let stackTurn: Promise<unknown> = Promise.resolve();
/**
 * Runs fn once every stack action before it has ended. A fault drawn to strike while another fault's repair
 * runs `services.sh up` (a Redis SIGKILL just after up saw Redis ready) would fail that repair, not the product.
 */
function onStack<T>(fn: () => Promise<T>): Promise<T> {
  const turn = stackTurn.then(fn, fn);
  stackTurn = turn.catch(() => undefined);
  return turn;
}

/** Runs scripts/services.sh; a failure throws with the script's own output, which names the service and its log. */
const services = (...args: string[]) => onStack(() => servicesNow(args));

async function servicesNow(args: string[]): Promise<void> {
  try {
    await run('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], { cwd: ROOT, timeout: 180_000 });
  } catch (err) {
    const { stdout = '', stderr = '' } = err as { stdout?: string; stderr?: string };
    throw new Error(`services.sh ${args.join(' ')} failed:\n${stdout}${stderr}`);
  }
}
/**
 * @returns the pid in the stack's pid file when that process runs and is the named program, else undefined
 * (a SIGKILLed server leaves its pid file behind, and the pid may since belong to another process)
 */
function livePid(file: string, program: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(ROOT, '.local', file), 'utf8').split('\n')[0]);
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === program ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Injects one fault and repairs it forMs later (the repair is awaited, so a run's faults end before it settles). */
async function inject(fault: PlannedFault, fleet: Fleet, clients: Clients, layout: SaleLayout, seen: Observed): Promise<void> {
  const redis = clients.redis;
  // A process still starting (the repair of an earlier fault on it) is killed once it is up: killing it before
  // would fail that repair, not the product (seed 1009: two worker kills 6 s apart).
  const kill = async (slot: string, children: Child[]) => {
    await fleet.settled(slot);
    const child = children[fault.target];
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
  };
  // A service stopped through services.sh (`stop NAME [MODE]`) for forMs, then started again by `up`.
  const outage = async (...stop: string[]) => {
    await services('stop', ...stop);
    await sleep(fault.forMs);
    await services('up');
  };
  switch (fault.kind) {
    case 'api-kill':
      await kill(`api-${fault.target}`, fleet.apis);
      await sleep(fault.forMs);
      return fleet.startApi(fault.target);
    case 'worker-kill':
      await kill(`worker-${fault.target}`, fleet.workers);
      await sleep(fault.forMs);
      return fleet.startWorker(fault.target);
    case 'redis-kill':
      await onStack(async () => {
        const pid = livePid('redis/redis.pid', 'redis-server');
        if (pid) process.kill(pid, 'SIGKILL');
      });
      await sleep(fault.forMs);
      await services('up');
      return;
    case 'redis-script-flush':
      await redis.script('FLUSH');
      return;
    case 'redis-master-kill':
      await onStack(async () => {
        const master = masterOf(layout.tags[fault.target % layout.tags.length]);
        if (master) process.kill(nodePid(Number(master.split(':')[1])), 'SIGKILL');
      });
      await sleep(fault.forMs);
      // Back as a replica of its successor; `up` returns once every replica is in sync.
      await services('up');
      return;
    case 'redis-reshard': {
      const tag = layout.tags[fault.target % layout.tags.length];
      const slot = calculateSlot(tag);
      const moved = await onStack(async () => {
        const from = masterOf(tag);
        const to = clusterNodesInfo().find((n) => n.master && !n.failed && n.address !== from);
        if (!from || !to) return undefined;
        await migrateSlot(slot, to.port);
        return Number(from.split(':')[1]);
      });
      await sleep(fault.forMs);
      if (moved !== undefined) await onStack(() => migrateSlot(slot, moved));
      return;
    }
    case 'redis-connections-drop': {
      const storm = dropConnections(
        clusterNodesInfo()
          .filter((n) => n.master && !n.failed)
          .map((n) => n.port),
        20,
      );
      await sleep(fault.forMs);
      await storm.stop();
      return;
    }
    case 'redis-shard-loss':
      await loseShard(clients, layout, fault.target % layout.tags.length, seen);
      await sleep(fault.forMs);
      return rebuild(clients, layout.saleId);
    case 'shard-loss-workers-stopped':
      await Promise.all(fleet.workers.map((_, i) => killWorker(fleet, i)));
      await sleep(fault.forMs);
      // Redis may be down for another fault of the run (SIGKILLed): the loss waits until it is back.
      await untilDone(() => loseShard(clients, layout, fault.target % layout.tags.length, seen));
      await rebuild(clients, layout.saleId);
      await Promise.all(fleet.workers.map((_, i) => fleet.startWorker(i)));
      return;
    case 'kafka-stop':
      return outage('kafka');
    case 'postgres-restart-fast':
    case 'postgres-restart-immediate':
      return outage('postgres', fault.kind === 'postgres-restart-fast' ? 'fast' : 'immediate');
    case 'temporal-restart':
      return outage('temporal');
    case 'temporal-history-kill':
      await onStack(async () => {
        const pid = livePid('temporal-server/history.pid', 'server');
        // Every service of the server is a process named `server`: its command line says which.
        if (pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--service\0history')) process.kill(pid, 'SIGKILL');
      });
      await sleep(fault.forMs);
      await services('up');
      return;
    case 'temporal-frontend-restart':
      return outage('temporal-frontend');
    case 'temporal-freeze':
      fleet.relay.freeze();
      await sleep(fault.forMs);
      fleet.relay.thaw();
      return;
    case 'temporal-drop':
      await fleet.relay.cut();
      await sleep(fault.forMs);
      await fleet.relay.restore();
      return;
    case 'temporal-latency':
      fleet.relay.delay(200);
      await sleep(fault.forMs);
      fleet.relay.delay(0);
      return;
  }
}

/** SIGKILLs worker i once any start of it in progress has ended, and waits until it has exited. */
async function killWorker(fleet: Fleet, i: number): Promise<void> {
  await fleet.settled(`worker-${i}`);
  const child = fleet.workers[i];
  if (child.process.exitCode !== null || child.process.signalCode !== null) return;
  const exited = new Promise((resolve) => child.process.once('exit', resolve));
  child.process.kill('SIGKILL');
  await exited;
}

/**
 * Deletes every key of the sale's shard k at once (one MULTI: one slot), as a master restarted without its data
 * loses them, and records the orders whose reservations went with them.
 */
async function loseShard(clients: Clients, layout: SaleLayout, k: number, seen: Observed): Promise<void> {
  const keys = shardKeys(layout.tags[k]);
  const items = [...layout.itemShards].filter(([, shards]) => shards > k).map(([itemId]) => itemId);
  const replies = await onStack(() =>
    clients.redis
      .multi()
      .hkeys(keys.reservations)
      .del(keys.buyers, keys.reservations, keys.claims, keys.startQueue, keys.loaded, keys.released, ...items.flatMap((id) => [keys.stock(id), keys.returns(id)]))
      .exec(),
  );
  const [err, held] = replies?.[0] ?? [new Error('MULTI without replies')];
  if (err) throw err;
  for (const orderId of held as string[]) seen.lostWithShard.add(orderId);
}

/** The operator's repair after a shard lost its data: a forced rebuild (only the lost shard is rewritten), retried while Redis or PostgreSQL is down. */
function rebuild(clients: Clients, saleId: number): Promise<void> {
  return untilDone(() => onStack(() => loadSale(clients.pool, clients.store, saleId, true, true)).then(() => undefined));
}

/** Runs action again, every second for up to 2 minutes, while it fails (a service it needs is down for another fault). */
async function untilDone(action: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      return await action();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(1000);
    }
  }
}

/** The campaign's shared clients, for set-up and the checks. */
interface Clients {
  config: Config;
  pool: Pool;
  redis: FlashRedis;
  store: ReservationStore;
  temporal: Client;
}

/** One HTTP call that never throws: a network error (a killed API) is status 0. Records 5xx without Retry-After. */
async function call(url: string, init: { method: string; headers: Record<string, string>; body?: string }, seen: Observed): Promise<{ status: number; body: Record<string, unknown> }> {
  try {
    const res = await request(url, { ...init, headersTimeout: 20_000, bodyTimeout: 20_000 });
    const text = await res.body.text();
    if (res.statusCode >= 500 && !(res.statusCode === 503 && res.headers['retry-after'])) seen.fiveHundreds.push(`${init.method} ${url} → ${res.statusCode} ${text}`);
    try {
      return { status: res.statusCode, body: JSON.parse(text) as Record<string, unknown> };
    } catch {
      return { status: res.statusCode, body: {} };
    }
  } catch {
    return { status: 0, body: {} };
  }
}

/** Runs the crowd and the payments of one run (its faults run beside). */
async function trade(rng: Random, clients: Clients, fleet: Fleet, sale: { saleId: number; items: { itemId: number }[] }, units: number, priceMinor: number, windowMs: number, seen: Observed): Promise<void> {
  const { config } = clients;
  const sign = createSigner({ key: config.JWT_SECRET, algorithm: 'HS256', expiresIn: 3_600_000 });
  const buyers = units * 2 + rng.int(0, 10);
  const presses: { token: string; itemId: number; atMs: number }[] = [];
  for (let b = 0; b < buyers; b++) {
    const token = sign({ sub: `chaos-${sale.saleId}-${b}` });
    const itemId = rng.pick(sale.items).itemId;
    presses.push({ token, itemId, atMs: rng.int(0, CROWD_MS) });
    if (rng.chance(0.2)) presses.push({ token, itemId, atMs: rng.int(0, CROWD_MS) });
    if (rng.chance(0.1)) presses.push({ token, itemId: rng.pick(sale.items).itemId, atMs: rng.int(0, CROWD_MS) });
  }
  const apiUrl = () => `http://${config.API_HOST}:${rng.pick(fleet.apis).port}`;
  // Read as the sale page reads it, before the crowd presses (no draw from rng: the seed's plan stays the same).
  const gate = await saleGateOf(`http://${config.API_HOST}:${fleet.apis[0].port}`, sale.saleId, Date.now() + 60_000);
  const payments: Promise<void>[] = [];
  const start = Date.now();

  const pay = async (orderId: string) => {
    const paymentId = `pay-${orderId}`;
    const channel = rng.chance(0.7) ? 'route' : 'signal';
    const wrongFirst = channel === 'route' && rng.chance(0.1);
    const twice = rng.chance(0.15);
    const first = rng.int(0, 1);
    await sleep(rng.int(200, Math.floor(windowMs * 1.3)));
    // As a payment service behind a load balancer: each try to the next API, for up to PAY_RETRY_MS (an API
    // killed while PostgreSQL is away takes that long to come back). No draw from rng: the plan stays the seed's.
    const attempt = async (amount: number): Promise<string> => {
      const until = Date.now() + PAY_RETRY_MS;
      let last = 'no try';
      for (let tries = 0; Date.now() < until; tries++) {
        if (channel === 'signal') {
          try {
            await clients.temporal.workflow.getHandle(orderId).signal(paidSignal, { paymentId, amount });
            return 'signalled';
          } catch (err) {
            // Not started yet, or ended: a payment service tries again, then gives up once the order is final.
            const row = await clients.pool.query<{ status: OrderStatus }>('SELECT status FROM orders WHERE id = $1', [orderId]).catch(() => ({ rows: [] as { status: OrderStatus }[] }));
            if (err instanceof WorkflowNotFoundError && row.rows[0] && row.rows[0].status !== 'PENDING') return 'not-delivered';
          }
        } else {
          // The payment route is on each API's internal door.
          const url = `http://${config.INTERNAL_API_HOST}:${fleet.apis[(first + tries) % fleet.apis.length].internalPort}`;
          const reply = await call(`${url}/api/flash-sales/orders/${orderId}/payment`, {
            method: 'POST',
            headers: { authorization: `Bearer ${config.PAYMENT_SERVICE_TOKEN}`, 'content-type': 'application/json' },
            body: JSON.stringify({ paymentId, amount }),
          }, seen);
          if (reply.status !== 0 && reply.status < 500) return reply.status === 200 ? '200' : `${reply.status} ${String(reply.body.error)}`;
          last = reply.status ? `${reply.status} ${String(reply.body.error)}` : 'no answer';
        }
        await sleep(500);
      }
      return `gave up (last: ${last})`;
    };
    if (wrongFirst) seen.payments.push({ orderId, paymentId: `${paymentId}-wrong`, channel, outcome: await attempt(priceMinor - 1) });
    seen.payments.push({ orderId, paymentId, channel, outcome: await attempt(priceMinor) });
    if (twice) seen.payments.push({ orderId, paymentId, channel, outcome: await attempt(priceMinor) });
  };

  await Promise.all(
    rng.shuffle(presses).map(async (press) => {
      await sleep(Math.max(0, start + press.atMs - Date.now()));
      for (let tries = 0; tries < 20; tries++) {
        const reply = await call(`${apiUrl()}/api/flash-sales/items/${press.itemId}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${press.token}`, 'sale-gate': gate } }, seen);
        if (reply.status === 202) {
          const orderId = reply.body.orderId as string;
          seen.accepted.push(orderId);
          if (rng.chance(0.6)) payments.push(pay(orderId));
          return;
        }
        // A buyer presses again after an outage (no answer, or 503); any other answer is final.
        if (reply.status !== 0 && reply.status !== 503) return;
        await sleep(300);
      }
    }),
  );
  await Promise.all(payments);
}

/**
 * The campaign's own rules for a settled run, beside the audit: every 202's order final; every 200 from the
 * payment route a PAID order with that payment, holding its unit; every refusal an order whose unit came back
 * (or, refused as not pending, one paid by another payment); every delivered signal either paid the order or
 * was refunded on Kafka; no 5xx but 503 with Retry-After; no more 202s than the stock plus the units that
 * came back.
 */
async function checkRun(clients: Clients, saleId: number, quantity: number, seen: Observed, gone: ReadonlySet<string>): Promise<string[]> {
  const violations: string[] = [];
  const rows = (
    await clients.pool.query<{ id: string; status: OrderStatus; paymentId: string | null }>(
      'SELECT id, status, payment_id AS "paymentId" FROM orders WHERE sale_id = $1',
      [saleId],
    )
  ).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  const held = new Set((await clients.store.reservations(saleId)).map((r) => r.orderId));
  for (const id of seen.accepted.filter((id) => !gone.has(id))) {
    const status = byId.get(id)?.status;
    if (status !== 'PAID' && status !== 'EXPIRED' && status !== 'REJECTED') violations.push(`202 ${id} ended ${status ?? 'with no row'}`);
  }
  const { events } = await readSaleEvents(createKafka(clients.config, `chaos-check-${randomUUID()}`), clients.config.KAFKA_TOPIC, saleId, await saleEventsSince(clients.pool, saleId));
  const refunded = new Set([...events.values()].filter((e) => e.type === 'PaymentRefundRequired').map((e) => `${e.orderId}:${e.paymentId}`));
  for (const p of seen.payments.filter((p) => !gone.has(p.orderId))) {
    const row = byId.get(p.orderId);
    const back = !held.has(p.orderId) && (row?.status === 'EXPIRED' || row?.status === 'REJECTED');
    const ok =
      p.outcome === '200'
        ? row?.status === 'PAID' && row.paymentId === p.paymentId && held.has(p.orderId)
        : p.outcome === '409 PAYMENT_WINDOW_CLOSED'
          ? back
          : p.outcome === '409 ORDER_NOT_PENDING'
            ? back || (row?.status === 'PAID' && row.paymentId !== p.paymentId)
            : p.outcome === '422 AMOUNT_MISMATCH'
              ? p.paymentId.endsWith('-wrong')
              : p.outcome === 'signalled'
                ? (row?.status === 'PAID' && row.paymentId === p.paymentId) || refunded.has(`${p.orderId}:${p.paymentId}`)
                : p.outcome === 'not-delivered';
    if (!ok) violations.push(`payment ${p.paymentId} by ${p.channel}: ${p.outcome}, but the order is ${row?.status ?? 'missing'} (${row?.paymentId ?? 'no payment'}, unit ${held.has(p.orderId) ? 'held' : 'back'})`);
  }
  violations.push(...seen.fiveHundreds.map((line) => `5xx without Retry-After: ${line}`));
  const back = rows.filter((r) => r.status === 'EXPIRED' || r.status === 'REJECTED').length;
  // A unit whose order went with a lost shard is counted free again by the rebuild: it may be sold once more.
  if (seen.accepted.length > quantity + back + gone.size) violations.push(`${seen.accepted.length} × 202 > stock ${quantity} + ${back} units back + ${gone.size} gone with a shard`);
  return violations;
}

/**
 * @returns the 202s whose order a shard loss took before any workflow stored it: held by the lost shard, and with
 *   neither a row nor a workflow once the sale settled
 */
async function goneWithShard(clients: Clients, saleId: number, seen: Observed): Promise<Set<string>> {
  const candidates = seen.accepted.filter((id) => seen.lostWithShard.has(id));
  if (!candidates.length) return new Set();
  const { rows } = await clients.pool.query<{ id: string }>('SELECT id FROM orders WHERE sale_id = $1 AND id = ANY($2)', [saleId, candidates]);
  const stored = new Set(rows.map((r) => r.id));
  const gone = new Set<string>();
  for (const id of candidates) {
    if (stored.has(id)) continue;
    const started = await clients.temporal.workflow.getHandle(id).describe().then(
      () => true,
      (err: unknown) => !(err instanceof WorkflowNotFoundError),
    );
    if (!started) gone.add(id);
  }
  return gone;
}

/** Waits (bounded) until every order of the sale is final in PostgreSQL, no workflow of it runs and no purchase claim is left. */
async function settled(clients: Clients, saleId: number, accepted: number): Promise<boolean> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  while (Date.now() < deadline) {
    try {
      const { rows } = await clients.pool.query<{ total: number; open: number }>(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'PENDING')::int AS open FROM orders WHERE sale_id = $1`,
        [saleId],
      );
      const { waiting: queued } = await new StartQueue(clients.redis, clients.store.layouts).depth(saleId, Date.now());
      const running = await clients.temporal.workflow.count(`SaleId = ${saleId} AND ExecutionStatus = "Running"`);
      // Claims a failed press left (a dropped connection) are repaired once STARTER_CLAIM_IDLE_MS old.
      const claims = await clients.store.claims(saleId);
      if (rows[0].total >= accepted && rows[0].open === 0 && queued === 0 && running.count === 0 && claims.length === 0) return true;
    } catch {
      // A service still coming back: look again.
    }
    await sleep(1000);
  }
  return false;
}

/** A run's sale and faults as its seed draws them (the crowd's and the payments' draws follow on `rng`). */
export interface RunPlan {
  rng: Random;
  windowMs: number;
  priceMinor: number;
  /** Units of each item of the run's sale. */
  quantities: number[];
  faults: PlannedFault[];
}

/** @returns the run's plan for a seed on a fault set: the same for the same seed, every time */
export function planRun(seed: number, set: FaultSet): RunPlan {
  const rng = new Random(seed);
  const windowMs = rng.int(3000, 6000);
  const priceMinor = rng.int(500, 5000);
  const quantities = Array.from({ length: rng.int(2, 3) }, () => rng.int(10, 30));
  const faults = [...planFaults(rng, set), ...planShardLossIdle(seed, set)].sort((a, b) => a.atMs - b.atMs);
  return { rng, windowMs, priceMinor, quantities, faults };
}

/** One run: a sale, its crowd, payments and faults, then the checks. */
async function runOnce(seed: number, clients: Clients, fleet: Fleet, set: FaultSet): Promise<RunResult> {
  const cluster = set === 'cluster';
  const t0 = Date.now();
  const { rng, windowMs, priceMinor, quantities, faults } = planRun(seed, set);
  const quantity = quantities.reduce((a, b) => a + b, 0);
  const created = await createSale(clients.pool, {
    name: `chaos seed ${seed}${set === 'node' ? '' : ` (${set})`}`,
    startsAt: new Date(Date.now() - 1000).toISOString(),
    endsAt: new Date(Date.now() + 3_600_000).toISOString(),
    paymentWindowMs: windowMs,
    items: quantities.map((q, i) => ({ productId: `chaos-${i}`, quantity: q, priceMinor, currency: 'EUR', ...(cluster && { stockShards: CLUSTER_SHARDS }) })),
  }, shardPlacer(clients.store.redis));
  await loadSale(clients.pool, clients.store, created.saleId, false);
  const layout = await clients.store.layouts.get(created.saleId);
  const seen: Observed = { accepted: [], lostWithShard: new Set(), fiveHundreds: [], payments: [] };
  const opened = Date.now();
  await Promise.all([
    trade(rng, clients, fleet, created, quantity, priceMinor, windowMs, seen),
    ...faults.map(async (fault) => {
      await sleep(Math.max(0, opened + fault.atMs - Date.now()));
      await inject(fault, fleet, clients, layout, seen);
    }),
  ]);
  await services('up');
  await fleet.heal();
  const violations: string[] = [];
  const mayBeGone = seen.accepted.filter((id) => seen.lostWithShard.has(id)).length;
  if (!(await settled(clients, created.saleId, seen.accepted.length - mayBeGone))) violations.push(`not settled within ${SETTLE_TIMEOUT_MS} ms`);
  const gone = await goneWithShard(clients, created.saleId, seen);
  const audit = await auditSale(
    { pool: clients.pool, store: clients.store, temporal: clients.temporal, kafka: createKafka(clients.config, `chaos-audit-${randomUUID()}`), topic: clients.config.KAFKA_TOPIC },
    created.saleId,
    seen.accepted.filter((id) => !gone.has(id)),
  );
  violations.push(...audit.checks.filter((c) => !c.ok).map((c) => `audit ${c.invariant} ${c.name}: ${JSON.stringify(c.figures)} e.g. ${c.examples?.join(', ')}`));
  violations.push(...(await checkRun(clients, created.saleId, quantity, seen, gone)));
  const counts = await clients.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM orders WHERE sale_id = $1 GROUP BY status', [created.saleId]);
  return {
    seed,
    saleId: created.saleId,
    faults,
    orders: Object.fromEntries(counts.rows.map((r) => [r.status, r.n])),
    accepted: seen.accepted.length,
    goneWithShard: gone.size,
    payments: seen.payments.length,
    violations,
    durationMs: Date.now() - t0,
  };
}

/** @returns the command that replays one run on its own */
function replayCommand(seed: number, set: FaultSet): string {
  return `npm run chaos -- --runs 1 --seed ${seed}${{ node: '', cluster: ' --cluster', server: ' --temporal-server' }[set]}`;
}

const runLine = (r: RunResult) =>
  `seed ${r.seed} sale ${r.saleId}: faults ${r.faults.map((f) => `${f.kind}@${(f.atMs / 1000).toFixed(1)}s`).join(', ')} | ` +
  `202 ${r.accepted}${r.goneWithShard ? ` (${r.goneWithShard} gone with a shard)` : ''} | ${Object.entries(r.orders).map(([s, n]) => `${s} ${n}`).join(', ')} | payments ${r.payments} | ${(r.durationMs / 1000).toFixed(0)} s → ` +
  (r.violations.length ? `VIOLATION (${r.violations.length})` : 'ok');

/**
 * Runs the campaign: one run per seed; one line per run, then a summary table. Logs of runs with a
 * violation (and of all runs with keepLogs) stay under reportDir/chaos-<time>/.
 * @returns every run's result
 */
export async function runCampaign(options: CampaignOptions): Promise<RunResult[]> {
  const dir = join(options.reportDir, `chaos-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  if (options.cluster && options.temporalServer) throw new Error('a campaign runs on the Redis Cluster or on the real Temporal server, not both');
  const set: FaultSet = options.cluster ? 'cluster' : options.temporalServer ? 'server' : 'node';
  await services('up', ...{ node: [], cluster: ['--cluster'], server: ['--temporal-server'] }[set]);
  const onCluster = set === 'cluster' ? { REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0', REDIS_WAIT_REPLICAS: '1' } : {};
  const serverPort = realServerPort();
  if (set === 'server' && serverPort === undefined) throw new Error('the real Temporal server has no .local/temporal-server/server.env: services.sh up --temporal-server did not make it');
  const onServer = set === 'server' ? { TEMPORAL_PORT: serverPort } : {};
  const config = loadConfig({ ...process.env, ...onCluster, ...onServer, LOG_LEVEL: 'silent' });
  const relay = await openRelay(config.TEMPORAL_HOST, config.TEMPORAL_PORT);
  const env = {
    ...process.env,
    ...onCluster,
    LOG_LEVEL: 'info',
    TEMPORAL_PORT: String(relay.port),
    TEMPORAL_TASK_QUEUE: `chaos-${randomUUID()}`,
    TEMPORAL_CALL_TIMEOUT_MS: '3000',
    STARTER_CLAIM_IDLE_MS: '5000',
    RATE_LIMIT_PER_IP: String(CROWD_IP_LIMIT),
  };
  const fleet = new Fleet(env, dir, relay);
  const redis = createRedis(config);
  redis.on('error', () => undefined);
  const pool = createPool(config);
  const clients: Clients = { config, pool, redis, store: new ReservationStore(redis, new SaleLayouts(pool)), temporal: await connectTemporal(config) };
  const results: RunResult[] = [];
  try {
    await Promise.all([fleet.startApi(0), fleet.startApi(1), fleet.startWorker(0), fleet.startWorker(1)]);
    for (const seed of options.seeds) {
      const result = await runOnce(seed, clients, fleet, set);
      results.push(result);
      options.print(runLine(result));
      writeFileSync(join(dir, `run-${seed}.json`), JSON.stringify(result, null, 2));
      if (result.violations.length) {
        for (const v of result.violations.slice(0, 20)) options.print(`    ${v}`);
        options.print(`    replay: ${replayCommand(seed, set)}; logs: ${dir}`);
      }
    }
  } finally {
    await fleet.stop();
    await relay.close();
    await Promise.allSettled([pool.end(), redis.quit(), clients.temporal.connection.close()]);
  }
  options.print(summary(results, faultKinds(set)));
  if (!options.keepLogs && results.every((r) => !r.violations.length)) rmSync(dir, { recursive: true, force: true });
  return results;
}

/** The summary table: faults by kind (those of `kinds`, the single node's by default), runs, orders, violations. */
export function summary(results: readonly RunResult[], kinds: readonly FaultKind[] = faultKinds('node')): string {
  const byKind = new Map<FaultKind, { faults: number; runs: number; violations: number }>(kinds.map((k) => [k, { faults: 0, runs: 0, violations: 0 }]));
  for (const r of results) {
    for (const kind of new Set(r.faults.map((f) => f.kind))) {
      const row = byKind.get(kind) as { faults: number; runs: number; violations: number };
      row.runs += 1;
      row.faults += r.faults.filter((f) => f.kind === kind).length;
      if (r.violations.length) row.violations += 1;
    }
  }
  const orders = results.reduce((n, r) => n + r.accepted, 0);
  const failed = results.filter((r) => r.violations.length).length;
  return [
    '',
    '| fault | injected | runs with it | runs with a violation |',
    '|---|---|---|---|',
    ...[...byKind].map(([kind, row]) => `| ${kind} | ${row.faults} | ${row.runs} | ${row.violations} |`),
    '',
    `runs ${results.length} | orders (202) ${orders} | runs with a violation ${failed}`,
  ].join('\n');
}
