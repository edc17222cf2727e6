/**
 * The main job at small size, through the same code path as `npm run demo`: API and worker as processes, a
 * crowd over HTTP, payments by route and signal, expiries, a second wave, then the audit of every store.
 */
import { randomUUID } from 'node:crypto';
import { freePort } from '../tools/shared/processes';
import { runDemo, DEFAULT_DEMO } from '../tools/demo/run';

test('2,000 buyers, 200 units, 10 s payment window: every unit ends PAID, nothing oversold, audit passes', async () => {
  const lines: string[] = [];
  const result = await runDemo({
    ...DEFAULT_DEMO,
    quantity: 200,
    buyers: 2000,
    secondWaveBuyers: 1000,
    paymentWindowMs: 10_000,
    concurrency: 100,
    apiPort: await freePort(),
    taskQueue: `demo-test-${randomUUID()}`,
    maxDurationMs: 8 * 60_000,
    print: (line) => lines.push(line),
  });

  const failed = result.audit.checks.filter((c) => !c.ok).map((c) => `${c.invariant} ${c.name}: ${JSON.stringify(c.figures)} ${c.examples}`);
  expect(failed).toEqual([]);
  expect(result.audit.ok).toBe(true);

  const [wave1, wave2] = result.waves;
  // The stampede takes the whole stock (plus any unit that expired and came back while it still ran);
  // everyone else hears 410 (or 409 on a repeated press).
  expect(wave1.statusCounts['202']).toBeGreaterThanOrEqual(200);
  expect(wave1.requests).toBe((wave1.statusCounts['202'] ?? 0) + (wave1.statusCounts['409'] ?? 0) + (wave1.statusCounts['410'] ?? 0));
  // Every unit that came back from an expired order was sold again, and all of those were paid.
  const expired = result.finalCounts.EXPIRED ?? 0;
  expect(expired).toBeGreaterThan(0);
  expect((wave1.statusCounts['202'] ?? 0) + (wave2.statusCounts['202'] ?? 0)).toBe(200 + expired);
  expect(result.finalCounts.PAID).toBe(200);
  expect(result.finalCounts.PENDING).toBeUndefined();
  expect(result.finalCounts.REJECTED).toBeUndefined();
  expect(lines.some((l) => l.includes('persisted'))).toBe(true);
}, 9 * 60_000);
