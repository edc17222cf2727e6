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
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { auditSale } from '../../src/audit';
import { loadConfig } from '../../src/config';
import { createPool } from '../../src/infra/db';
import { createKafka } from '../../src/infra/kafka';
import { CROWD_IP_LIMIT } from '../../test/support/crowd';
import { ReservationStore } from '../../src/reservation/store';
import { createRedis } from '../../src/reservation/client';
import { SaleLayouts } from '../../src/reservation/layout';
import { clusterNodes } from '../../test/support/localCluster';
import { clusterBrokers } from '../../test/support/kafkaCluster';
import { kafkaFault } from './kafkaFaults';
import { createSale, loadSale } from '../../src/sale/sales';
import { connectTemporal } from '../../src/workflows/client';
import { openRelay } from '../../test/support/relay';
import { shardPlacer } from '../../src/reservation/placement';
import { realServerPort } from '../shared/procCpu';
import { inject } from './faults';
import { Fleet, services } from './fleet';
import { faultKinds, planRun, type FaultKind, type FaultSet, type PlannedFault } from './plan';
import { checkRun, goneWithShard, settled, SETTLE_TIMEOUT_MS, trade, type Clients, type Observed } from './traffic';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Stock shards of each item of a run on the cluster: one per master. */
const CLUSTER_SHARDS = 3;

export interface RunResult {
  seed: number;
  saleId: number;
  faults: PlannedFault[];
  orders: Record<string, number>;
  accepted: number;
  /** 202s whose order a shard loss took before PostgreSQL had it: gone by design (docs/operations.md), not a violation. */
  goneWithShard: number;
  payments: number;
  /** Cancels sent, and the controls answered (pause, resume, end). */
  cancels: number;
  controls: string[];
  /** What the reconciler repaired in the run's sale, by kind (docs/operations.md, "The reconciler repaired Redis"). */
  repairs: Record<string, number>;
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
  /** Run on the three-broker Kafka cluster (services.sh up --kafka-cluster), with its faults (faultKinds('kafka')). */
  kafkaCluster?: boolean;
  print(line: string): void;
}

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
  const seen: Observed = { accepted: [], lostWithShard: new Set(), fiveHundreds: [], payments: [], cancels: [], controls: [], presses: [] };
  const opened = Date.now();
  await Promise.all([
    trade(rng, clients, fleet, created, quantity, priceMinor, windowMs, seen),
    ...faults.map(async (fault) => {
      await sleep(Math.max(0, opened + fault.atMs - Date.now()));
      if (!(await kafkaFault(fault, clients.config.KAFKA_TOPIC, layout))) await inject(fault, fleet, clients, layout, seen);
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
    cancels: seen.cancels.length,
    controls: seen.controls.filter((c) => c.answeredAt !== undefined).map((c) => c.action),
    repairs: fleet.repairsOf(created.saleId),
    violations,
    durationMs: Date.now() - t0,
  };
}

/** @returns the command that replays one run on its own */
function replayCommand(seed: number, set: FaultSet): string {
  return `npm run chaos -- --runs 1 --seed ${seed}${{ node: '', cluster: ' --cluster', server: ' --temporal-server', kafka: ' --kafka-cluster' }[set]}`;
}

const runLine = (r: RunResult) =>
  `seed ${r.seed} sale ${r.saleId}: faults ${r.faults.map((f) => `${f.kind}@${(f.atMs / 1000).toFixed(1)}s`).join(', ')} | ` +
  `202 ${r.accepted}${r.goneWithShard ? ` (${r.goneWithShard} gone with a shard)` : ''} | ${Object.entries(r.orders).map(([s, n]) => `${s} ${n}`).join(', ')} | payments ${r.payments} | cancels ${r.cancels} | ${r.controls.join('+') || 'no control'} | ` +
  `${Object.keys(r.repairs).length ? `repaired ${Object.entries(r.repairs).map(([kind, n]) => `${kind} ${n}`).join(', ')}` : 'no repair'} | ${(r.durationMs / 1000).toFixed(0)} s → ` +
  (r.violations.length ? `VIOLATION (${r.violations.length})` : 'ok');

/**
 * Runs the campaign: one run per seed; one line per run, then a summary table. Logs of runs with a
 * violation (and of all runs with keepLogs) stay under reportDir/chaos-<time>/.
 * @returns every run's result
 */
export async function runCampaign(options: CampaignOptions): Promise<RunResult[]> {
  const dir = join(options.reportDir, `chaos-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  const sets = [options.cluster && 'cluster', options.temporalServer && 'server', options.kafkaCluster && 'kafka'].filter((x): x is FaultSet => Boolean(x));
  if (sets.length > 1) throw new Error('a campaign runs on one of the Redis Cluster, the real Temporal server and the Kafka cluster');
  const set: FaultSet = sets[0] ?? 'node';
  await services('up', ...{ node: [], cluster: ['--cluster'], server: ['--temporal-server'], kafka: ['--kafka-cluster'] }[set]);
  const onCluster = {
    ...(set === 'cluster' && { REDIS_CLUSTER_NODES: clusterNodes(), REDIS_DB: '0', REDIS_WAIT_REPLICAS: '1' }),
    ...(set === 'kafka' && { KAFKA_BROKERS: clusterBrokers() }),
  };
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
  const repairs = new Map<string, number>();
  for (const r of results) for (const [kind, n] of Object.entries(r.repairs ?? {})) repairs.set(kind, (repairs.get(kind) ?? 0) + n);
  return [
    '',
    '| fault | injected | runs with it | runs with a violation |',
    '|---|---|---|---|',
    ...[...byKind].map(([kind, row]) => `| ${kind} | ${row.faults} | ${row.runs} | ${row.violations} |`),
    '',
    `runs ${results.length} | orders (202) ${orders} | runs with a violation ${failed}`,
    `reconciler repairs: ${[...repairs].map(([kind, n]) => `${kind} ${n}`).join(', ') || 'none'}`,
  ].join('\n');
}
