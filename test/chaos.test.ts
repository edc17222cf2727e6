/**
 * The fault campaign (tools/chaos/campaign.ts): its plan is a function of the seed, its summary counts what it
 * ran, and a short campaign on fixed seeds ends with no violation. The seeds were picked so that together
 * they inject every kind of fault; a seed on which the campaign ever found a violation joins this set.
 */
import { faultKinds, planFaults, planRun, type FaultSet, runCampaign, summary, type RunResult } from '../tools/chaos/campaign';
import { Random } from '../tools/chaos/random';
import { stackEnv } from '../scripts/stack-env';
import { prepareEnvironment } from './environment';

/**
 * 31: relay freeze + postgres fast + api-kill; 55: relay cut + worker-kill + postgres immediate; and the
 * violations found: 1003, relay latency + SCRIPT FLUSH + Temporal restart (a payment racing the order's insert
 * answered 409 ORDER_NOT_PENDING), 1007, redis kill + Kafka outage (a payment for an order without a row while
 * Redis was away answered 500). 31 and 55 replaced 1, 2, 8 and 12, which drew the same kinds in four runs (CI
 * time: the real Temporal server joined the test command). On the real Temporal server, 265: frontend restart
 * at 0.4 s, history service SIGKILLed at 2.7 s. 40: an API killed at 0.2 s, then both workers killed at 2.5 s, the
 * sale's shard lost and rebuilt while they are down (shard-loss-workers-stopped, drawn on its own generator so
 * the seeds above kept their plans).
 */
const CI_SEEDS = [31, 55, 1003, 1007, 40];
const CI_SERVER_SEEDS = [265];

test('the fault added last draws on its own generator: the seeds that found violations keep their plans, and a quarter of the seeds draw it', () => {
  const kinds = (seed: number) => planRun(seed, 'node').faults.map((f) => f.kind);
  // As drawn before shard-loss-workers-stopped existed (the comment on CI_SEEDS).
  expect(kinds(1003)).toEqual(['temporal-latency', 'redis-script-flush', 'temporal-restart']);
  expect(kinds(1007)).toEqual(['redis-kill', 'kafka-stop']);
  for (const set of ['node', 'cluster'] as const) {
    const drew = Array.from({ length: 1000 }, (_, seed) => planRun(seed, set).faults.some((f) => f.kind === 'shard-loss-workers-stopped')).filter(Boolean).length;
    expect(drew).toBeGreaterThan(200);
    expect(drew).toBeLessThan(300);
  }
});

test('a seed draws the same faults every time, and another seed other faults', () => {
  const plans = (seed: number) => JSON.stringify(Array.from({ length: 5 }, () => planFaults(new Random(seed))));
  expect(plans(42)).toBe(plans(42));
  expect(plans(42)).not.toBe(plans(43));
  for (let seed = 0; seed < 200; seed++) {
    const faults = planFaults(new Random(seed));
    expect(faults.length).toBeGreaterThanOrEqual(1);
    expect(faults.length).toBeLessThanOrEqual(3);
    expect(faults.map((f) => f.atMs)).toEqual([...faults.map((f) => f.atMs)].sort((a, b) => a - b));
  }
});

test('each stack draws its own faults: the real Temporal server its service faults, never the dev server restart', () => {
  const drawn = (set: FaultSet) => new Set(Array.from({ length: 300 }, (_, seed) => planFaults(new Random(seed), set)).flat().map((f) => f.kind));
  const server = drawn('server');
  expect(server.has('temporal-history-kill') && server.has('temporal-frontend-restart')).toBe(true);
  expect(server.has('temporal-restart')).toBe(false);
  expect([...drawn('node')].filter((k) => k.startsWith('temporal-history') || k.startsWith('temporal-frontend'))).toEqual([]);
  expect([...server].every((k) => faultKinds('server').includes(k))).toBe(true);
});

test('the summary counts each kind of fault, the runs it was in, and the runs with a violation', () => {
  const run = (seed: number, kinds: RunResult['faults'][number]['kind'][], violations: string[]): RunResult => ({
    seed,
    saleId: seed,
    faults: kinds.map((kind) => ({ kind, atMs: 0, forMs: 1000, target: 0 })),
    orders: {},
    accepted: 10,
    goneWithShard: 0,
    payments: 0,
    violations,
    durationMs: 1,
  });
  const table = summary([run(1, ['redis-kill', 'redis-kill'], []), run(2, ['redis-kill', 'api-kill'], ['x'])]);
  expect(table).toContain('| redis-kill | 3 | 2 | 1 |');
  expect(table).toContain('| api-kill | 1 | 1 | 1 |');
  expect(table).toContain('| kafka-stop | 0 | 0 | 0 |');
  expect(table).toContain('runs 2 | orders (202) 20 | runs with a violation 1');
});

test('the CI seeds draw every kind of fault of the single node, and the server seeds both of the real server\'s own', () => {
  const drawn = (seeds: number[], set: FaultSet) => new Set(seeds.flatMap((seed) => planRun(seed, set).faults.map((f) => f.kind)));
  const node = drawn(CI_SEEDS, 'node');
  expect(faultKinds('node').filter((k) => !node.has(k))).toEqual([]);
  expect([...drawn(CI_SERVER_SEEDS, 'server')].filter((k) => k === 'temporal-history-kill' || k === 'temporal-frontend-restart').sort()).toEqual(['temporal-frontend-restart', 'temporal-history-kill']);
});

test(
  `short campaign on seeds ${CI_SEEDS.join(', ')}: every run settles with no violation`,
  async () => {
    const lines: string[] = [];
    const results = await runCampaign({ seeds: CI_SEEDS, reportDir: 'reports/test', keepLogs: false, print: (line) => lines.push(line) });
    const kinds = new Set(results.flatMap((r) => r.faults.map((f) => f.kind)));
    expect(faultKinds('node').filter((k) => !kinds.has(k))).toEqual([]);
    for (const r of results) {
      expect({ seed: r.seed, violations: r.violations }).toEqual({ seed: r.seed, violations: [] });
      expect(r.accepted).toBeGreaterThan(0);
    }
    expect(lines.filter((l) => l.endsWith('→ ok'))).toHaveLength(CI_SEEDS.length);
  },
  20 * 60_000,
);

test(
  `short campaign on the real Temporal server, seed ${CI_SERVER_SEEDS.join(', ')}: its history service killed, its frontend restarted, no violation`,
  async () => {
    // The suites' namespace and search attributes on the real server (the global set-up prepares the dev server's).
    await prepareEnvironment({ ...process.env, TEMPORAL_PORT: stackEnv().TEMPORAL_SERVER_PORT });
    const results = await runCampaign({ seeds: CI_SERVER_SEEDS, reportDir: 'reports/test', keepLogs: false, temporalServer: true, print: () => undefined });
    for (const r of results) {
      expect({ seed: r.seed, violations: r.violations }).toEqual({ seed: r.seed, violations: [] });
      expect(r.accepted).toBeGreaterThan(0);
    }
  },
  10 * 60_000,
);
