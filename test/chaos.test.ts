/**
 * The fault campaign (tools/chaos/campaign.ts): its plan is a function of the seed, its summary counts what it
 * ran, and a short campaign on fixed seeds ends with no violation. The seeds were picked so that together
 * they inject every kind of fault; a seed on which the campaign ever found a violation joins this set.
 */
import { FAULT_KINDS, planFaults, runCampaign, summary, type RunResult } from '../tools/chaos/campaign';
import { Random } from '../tools/chaos/random';

/**
 * 1: api-kill + worker-kill; 2: postgres immediate + worker-kill; 8: temporal restart + relay cut; 12: postgres
 * fast + redis kill + relay freeze; and the violations found: 1003, relay latency + SCRIPT FLUSH + Temporal
 * restart (a payment racing the order's insert answered 409 ORDER_NOT_PENDING), 1007, redis kill + Kafka outage
 * (a payment for an order without a row while Redis was away answered 500). Seeds 7 and 29 left the set when
 * the cluster suites joined the test command (CI time): every kind they drew is drawn by another seed here.
 */
const CI_SEEDS = [1, 2, 8, 12, 1003, 1007];

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

test(
  `short campaign on seeds ${CI_SEEDS.join(', ')}: every run settles with no violation`,
  async () => {
    const lines: string[] = [];
    const results = await runCampaign({ seeds: CI_SEEDS, reportDir: 'reports/test', keepLogs: false, print: (line) => lines.push(line) });
    const kinds = new Set(results.flatMap((r) => r.faults.map((f) => f.kind)));
    expect(FAULT_KINDS.filter((k) => !kinds.has(k))).toEqual([]);
    for (const r of results) {
      expect({ seed: r.seed, violations: r.violations }).toEqual({ seed: r.seed, violations: [] });
      expect(r.accepted).toBeGreaterThan(0);
    }
    expect(lines.filter((l) => l.endsWith('→ ok'))).toHaveLength(CI_SEEDS.length);
  },
  20 * 60_000,
);
