/**
 * The fault campaign (tools/chaos/campaign.ts) on fixed seeds, which together inject every kind of fault
 * (test/support/chaosSeeds.ts): every run ends with no violation. Its plans: test/chaos.unit.test.ts.
 */
import { runCampaign } from '../tools/chaos/campaign';
import { faultKinds } from '../tools/chaos/plan';
import { CI_SEEDS, CI_SERVER_SEEDS } from './support/chaosSeeds';
import { stackEnv } from '../scripts/stack-env';
import { prepareEnvironment } from './support/environment';

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
