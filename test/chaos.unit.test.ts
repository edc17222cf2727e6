/**
 * The fault campaign's plans (tools/chaos/campaign.ts), pure: a function of the seed, each stack its own faults,
 * the CI seeds drawing every kind; and its summary counting what it ran. test/chaos.test.ts runs the campaign.
 */
import { summary, type RunResult } from '../tools/chaos/campaign';
import { checkLevers } from '../tools/chaos/levers';
import { faultKinds, planFaults, planRun, type FaultKind, type FaultSet } from '../tools/chaos/plan';
import { Random } from '../tools/chaos/random';
import { CI_SEEDS, CI_SERVER_SEEDS } from './support/chaosSeeds';

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
  // The Kafka cluster: its broker faults, never the single broker's stop; the other stacks never draw them.
  const kafka = drawn('kafka');
  expect(['kafka-broker-kill', 'kafka-leader-move', 'kafka-brokers-down'].filter((k) => !kafka.has(k as FaultKind))).toEqual([]);
  expect(kafka.has('kafka-stop')).toBe(false);
  expect([...drawn('node'), ...drawn('cluster'), ...server].filter((k) => faultKinds('kafka').includes(k) && !faultKinds('node').includes(k))).toEqual([]);
});

test('the summary counts each kind of fault, the runs it was in, the runs with a violation and the reconciler\'s repairs', () => {
  const run = (seed: number, kinds: RunResult['faults'][number]['kind'][], violations: string[], repairs: Record<string, number> = {}): RunResult => ({
    seed,
    saleId: seed,
    faults: kinds.map((kind) => ({ kind, atMs: 0, forMs: 1000, target: 0 })),
    orders: {},
    accepted: 10,
    goneWithShard: 0,
    payments: 0,
    cancels: 0,
    controls: [],
    repairs,
    violations,
    durationMs: 1,
  });
  const table = summary([run(1, ['redis-kill', 'redis-kill'], [], { release: 2 }), run(2, ['redis-kill', 'api-kill'], ['x'], { release: 1, restore: 1 })]);
  expect(table).toContain('| redis-kill | 3 | 2 | 1 |');
  expect(table).toContain('| api-kill | 1 | 1 | 1 |');
  expect(table).toContain('| kafka-stop | 0 | 0 | 0 |');
  expect(table).toContain('runs 2 | orders (202) 20 | runs with a violation 1');
  expect(table).toContain('reconciler repairs: release 3, restore 1');
  expect(summary([run(3, ['api-kill'], [])])).toContain('reconciler repairs: none');
});

test('the cluster draws the failover that loses writes in about a quarter of its runs; the single node never', () => {
  const drew = (set: FaultSet) => Array.from({ length: 1000 }, (_, seed) => planRun(seed, set).faults.some((f) => f.kind === 'redis-failover-lost-writes')).filter(Boolean).length;
  expect(drew('cluster')).toBeGreaterThan(200);
  expect(drew('node')).toBe(0);
});

test('the CI seeds draw every kind of fault of the single node, and the server seeds both of the real server\'s own', () => {
  const drawn = (seeds: number[], set: FaultSet) => new Set(seeds.flatMap((seed) => planRun(seed, set).faults.map((f) => f.kind)));
  const node = drawn(CI_SEEDS, 'node');
  expect(faultKinds('node').filter((k) => !node.has(k))).toEqual([]);
  expect([...drawn(CI_SERVER_SEEDS, 'server')].filter((k) => k === 'temporal-history-kill' || k === 'temporal-frontend-restart').sort()).toEqual(['temporal-frontend-restart', 'temporal-history-kill']);
});

describe('the levers\' rules (checkLevers)', () => {
  const rows = new Map([
    ['cancelled', { status: 'CANCELLED' as const }],
    ['paid', { status: 'PAID' as const }],
    ['expired', { status: 'EXPIRED' as const }],
  ]);
  const pause = { action: 'pause' as const, sentAt: 1000, answeredAt: 1010 };
  const resume = { action: 'resume' as const, sentAt: 2000, answeredAt: 2010 };

  test('answers that agree with the end state, and 202s outside the pause, pass', () => {
    const cancels = [
      { orderId: 'cancelled', by: 'buyer' as const, outcome: '200' },
      { orderId: 'paid', by: 'payment-failure' as const, outcome: '409 ORDER_ALREADY_PAID' },
      { orderId: 'expired', by: 'buyer' as const, outcome: '409 PAYMENT_WINDOW_CLOSED' },
    ];
    const presses = [
      { orderId: 'a', sentAt: 990, answeredAt: 1020 },
      { orderId: 'b', sentAt: 1500, answeredAt: 2100 },
      { orderId: 'c', sentAt: 2050, answeredAt: 2060 },
    ];
    expect(checkLevers({ rows, held: new Set(['paid']), cancels, controls: [pause, resume], presses, gone: new Set(), signalled: new Set() })).toEqual([]);
  });

  test('a 200 cancel whose unit is still held, a refusal that disagrees, and a 202 pressed and answered while paused fail', () => {
    const cancels = [
      { orderId: 'cancelled', by: 'buyer' as const, outcome: '200' },
      { orderId: 'expired', by: 'buyer' as const, outcome: '409 ORDER_ALREADY_PAID' },
    ];
    const presses = [{ orderId: 'late', sentAt: 1200, answeredAt: 1300 }];
    const violations = checkLevers({ rows, held: new Set(['cancelled']), cancels, controls: [pause, resume], presses, gone: new Set(), signalled: new Set() });
    expect(violations).toHaveLength(3);
    expect(violations[2]).toMatch(/^202 late pressed 190 ms after the pause's answer$/);
  });

  test('after an end, no resume: every later 202 fails', () => {
    const end = { action: 'end' as const, sentAt: 3000, answeredAt: 3005 };
    expect(checkLevers({ rows, held: new Set(), cancels: [], controls: [end], presses: [{ orderId: 'x', sentAt: 9000, answeredAt: 9001 }], gone: new Set(), signalled: new Set() })).toHaveLength(1);
  });

  test('a cancel refused as late may meet an order a `paid` signal sent in time then paid, and only that', () => {
    const cancels = [{ orderId: 'paid', by: 'buyer' as const, outcome: '409 PAYMENT_WINDOW_CLOSED' }];
    const seen = { rows, held: new Set(['paid']), cancels, controls: [], presses: [], gone: new Set<string>() };
    expect(checkLevers({ ...seen, signalled: new Set(['paid']) })).toEqual([]);
    expect(checkLevers({ ...seen, signalled: new Set() })).toEqual(['cancel of paid by buyer: 409 PAYMENT_WINDOW_CLOSED, but the order is PAID (unit held)']);
  });
});
