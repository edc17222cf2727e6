/**
 * AcceptancePace (src/starter/pacing.ts), pure logic on explicit times and readings: starts wait while the last
 * two readings of the orders accepted show the configured pace or more, for at most the configured span in a
 * row, and an idle starter waits one more window when the first reading after a quiet one finds a few orders.
 * `at(t, false)`: a starter with starts under way.
 */
import { AcceptancePace } from '../../src/starter/pacing';

/** Readings every `stepMs` from `fromMs` to `toMs`, each with `perS` orders per second's worth. */
function readEvery(pace: AcceptancePace, perS: number, fromMs: number, toMs: number, stepMs = 250): void {
  for (let t = fromMs + stepMs; t <= toMs; t += stepMs) pace.read((perS * stepMs) / 1000, t);
}

test('quiet, or slower than the pace: starts go', () => {
  const pace = new AcceptancePace(200, 5000);
  pace.read(0, 0);
  expect(pace.at(0, false)).toBe('go');
  readEvery(pace, 100, 0, 1000);
  expect(pace.at(1000, false)).toBe('go');
});

test('at the pace or faster: starts wait, and go again once a reading after the last hot one saw none', () => {
  const pace = new AcceptancePace(200, 5000);
  pace.read(0, 0);
  pace.read(50, 250);
  expect(pace.at(250, false)).toBe('wait');
  readEvery(pace, 600, 250, 1000);
  expect(pace.at(1000, false)).toBe('wait');
  // The reading that held the last orders still counts until the next one has seen none.
  pace.read(0, 1250);
  expect(pace.at(1250, false)).toBe('wait');
  pace.read(0, 1500);
  expect(pace.at(1500, false)).toBe('go');
});

test("the pace is over each reading's own span: a long span dilutes, a short one does not", () => {
  const pace = new AcceptancePace(200, 5000);
  pace.read(0, 0);
  // 150 orders over a second: 150/s.
  pace.read(150, 1000);
  expect(pace.at(1000, false)).toBe('go');
  // The next 60 within 250 ms: 240/s.
  pace.read(60, 1250);
  expect(pace.at(1250, false)).toBe('wait');
});

test('hot for longer than the span: starts go on until a reading has dropped below the pace, then the next spell waits anew', () => {
  const pace = new AcceptancePace(200, 1000);
  pace.read(0, 0);
  readEvery(pace, 400, 0, 500);
  expect(pace.at(500, false)).toBe('wait');
  readEvery(pace, 400, 500, 1500);
  expect(pace.at(1500, false)).toBe('overdue');
  readEvery(pace, 400, 1500, 2500);
  expect(pace.at(2500, false)).toBe('overdue');
  // 160/s for two readings: both below the pace, starts go.
  readEvery(pace, 160, 2500, 3000);
  expect(pace.at(3000, false)).toBe('go');
  pace.read(100, 3250);
  expect(pace.at(3250, false)).toBe('wait');
});

test('an idle starter waits one more window when the first reading after a quiet one finds orders below the pace', () => {
  const pace = new AcceptancePace(200, 5000);
  pace.read(0, 0);
  pace.read(0, 1000);
  expect(pace.at(1000, true)).toBe('go');
  // 40 orders over a second's reading: 40/s, or a stampede's first 200 ms.
  pace.read(40, 2000);
  expect(pace.at(2000, true)).toBe('opening');
  // A busy starter does not wait for it: a trickle must not hold a drain.
  expect(pace.at(2000, false)).toBe('go');
  // The next window says which: a stampede is hot...
  pace.read(60, 2250);
  expect(pace.at(2250, true)).toBe('wait');
  // ...a lone buyer's order is not, and that reading follows one with orders: no second opening.
  const lone = new AcceptancePace(200, 5000);
  lone.read(0, 0);
  lone.read(1, 1000);
  expect(lone.at(1000, true)).toBe('opening');
  lone.read(0, 1250);
  expect(lone.at(1250, true)).toBe('go');
});

test('a pace of 0 never waits', () => {
  const pace = new AcceptancePace(0, 5000);
  pace.read(0, 0);
  pace.read(10_000, 100);
  expect(pace.at(100, false)).toBe('go');
});
